// Questions the control plane asks of a parsed catalog (which model, which profile) and
// the snapshot of a profile that a deployment runs.
import { FailureType } from '../common/failures.js';
import type { EngineProfile } from '../proto/gen/llmgw/v1/shard_pb.js';
import { engineProfileFromSnapshot } from '../common/profile-conversion.js';
import type { ProfileSnapshot } from '../common/replica-types.js';
import type { Catalog, CatalogModel, CatalogProfile } from './schema.js';
import { adapterEngineArgs } from './adapters.js';
import { sleepEngineArgs, sleepPolicy } from './sleep.js';

export function findModel(catalog: Catalog, name: string): CatalogModel | undefined {
  return catalog.models.find((model) => model.name === name);
}

export interface ProfileRequest {
  profile?: string | undefined;
  gpuClass?: string | undefined;
}

export type ProfileChoice =
  | { ok: true; model: CatalogModel; profile: CatalogProfile }
  | {
      ok: false;
      /** The ApplicationFailure type a workflow or activity should raise for this. */
      failureType:
        | typeof FailureType.UnknownModel
        | typeof FailureType.UnknownProfile
        | typeof FailureType.UnknownGpuClass
        | typeof FailureType.InvalidInput;
      message: string;
    };

/**
 * The profile to run `model` with: the named one, else the first for `gpuClass`, else the
 * model's first profile. Every refusal names the valid choices, because the caller is
 * usually a person at a CLI or in the Temporal UI.
 */
export function chooseProfile(catalog: Catalog, model: string, request: ProfileRequest = {}): ProfileChoice {
  const found = findModel(catalog, model);
  if (!found) {
    return {
      ok: false,
      failureType: FailureType.UnknownModel,
      message: `unknown model "${model}"; valid models: ${catalog.models.map((m) => m.name).join(', ')}`,
    };
  }
  const profileNames = found.profiles.map((p) => p.name).join(', ');
  const gpuClasses = [...new Set(found.profiles.map((p) => p.gpuClass))].join(', ');

  if (request.profile !== undefined) {
    const profile = found.profiles.find((p) => p.name === request.profile);
    if (!profile) {
      return {
        ok: false,
        failureType: FailureType.UnknownProfile,
        message: `unknown profile "${request.profile}" for model ${found.name}; valid profiles: ${profileNames}`,
      };
    }
    if (request.gpuClass !== undefined && profile.gpuClass !== request.gpuClass) {
      const matching = found.profiles.filter((p) => p.gpuClass === request.gpuClass).map((p) => p.name);
      return {
        ok: false,
        failureType: FailureType.InvalidInput,
        message:
          `profile ${profile.name} of model ${found.name} runs on ${profile.gpuClass}, not ${request.gpuClass}` +
          (matching.length > 0 ? `; profiles for ${request.gpuClass}: ${matching.join(', ')}` : `; GPU classes: ${gpuClasses}`),
      };
    }
    return { ok: true, model: found, profile };
  }

  if (request.gpuClass !== undefined) {
    const profile = found.profiles.find((p) => p.gpuClass === request.gpuClass);
    if (!profile) {
      return {
        ok: false,
        failureType: FailureType.UnknownGpuClass,
        message: `model ${found.name} has no profile for GPU class "${request.gpuClass}"; valid GPU classes: ${gpuClasses}`,
      };
    }
    return { ok: true, model: found, profile };
  }

  const [first] = found.profiles;
  if (!first) {
    // The schema requires a profile; this guards a catalog built by hand in code.
    return { ok: false, failureType: FailureType.UnknownProfile, message: `model ${found.name} has no profiles` };
  }
  return { ok: true, model: found, profile: first };
}

/**
 * What a replica runs, copied from the catalog at deploy time (plain JSON, so it travels in
 * workflow inputs). The wire form agents receive is made from this snapshot in one place,
 * common/profile-conversion.ts.
 */
export function profileSnapshot(model: CatalogModel, profile: CatalogProfile): ProfileSnapshot {
  // Adapter flags before the profile's own args, so that the catalog can still override them.
  const lora = adapterEngineArgs(profile.engine, profile.adapters, model.adapters);
  // Sleep flags go before the profile's args too; the policy's timings travel beside them.
  const sleep = sleepPolicy(profile.sleep);
  const sleepArgs = sleepEngineArgs(profile.engine, sleep);
  return {
    model: model.name,
    modelSource: model.source,
    servedName: model.servedName ?? model.name,
    profile: profile.name,
    engine: profile.engine,
    launcher: profile.launcher,
    gpuClass: profile.gpuClass,
    tensorParallel: profile.tensorParallel,
    pipelineParallel: profile.pipelineParallel,
    gpusPerNode: profile.gpusPerNode,
    nodes: profile.nodes,
    args: [...lora.args, ...sleepArgs.args, ...profile.args],
    env: Object.fromEntries(
      Object.entries({ ...lora.env, ...sleepArgs.env, ...profile.env }).map(([name, value]) => [
        name,
        typeof value === 'string' ? value : { fromHost: value.fromHost },
      ]),
    ),
    startupTimeoutSeconds: profile.startupTimeoutSeconds,
    minGpuMemoryMib: profile.minGpuMemoryMib ?? 0,
    ...(sleep !== undefined ? { sleep } : {}),
  };
}

/** The EngineProfile message for a catalog profile (through its snapshot). */
export function profileToEngineProfile(model: CatalogModel, profile: CatalogProfile): EngineProfile {
  return engineProfileFromSnapshot(profileSnapshot(model, profile));
}
