// Catalog activities: turn a deploy request into the profile snapshot a replica runs,
// or a non-retryable failure that names the problem and the valid choices.
import { setTimeout as sleep } from 'node:timers/promises';
import { ApplicationFailure, type Client } from '@temporalio/client';
import type { CatalogSource } from '../catalog/watch.js';
import { chooseProfile, profileSnapshot } from '../catalog/lookup.js';
import { readCatalogKeys } from '../common/catalog-key.js';
import { FailureType } from '../common/failures.js';
import type { ProfileSnapshot } from '../common/replica-types.js';
import { revisionOf } from '../common/revision.js';
import type { AutoscaleSettings } from '../common/autoscale.js';
import { signSnapshot } from '../common/revision-signature.js';
import { pinOrKeep, type KeepPin } from './weights-pin.js';

/** The snapshot with its revision digest, which deployments, replicas and `llmgw status` show. */
function withRevision(snapshot: ProfileSnapshot): ProfileSnapshot {
  return { ...snapshot, revision: revisionOf(snapshot) };
}

export interface ResolveRequest {
  model: string;
  profile?: string;
  gpuClass?: string;
  /** The deployment's current pin: kept while the catalog's source is unchanged (absent: pin afresh, `--refresh-source`). */
  keepPin?: KeepPin;
}

/**
 * `catalogKeyFile`: the key the control worker signs every resolved revision with, so that
 * agents start only what the catalog allows (docs/security.md). Read on every resolve, so a
 * rotated file needs no restart. Without one, revisions go out unsigned (agents refuse them
 * unless started with --insecure-unsigned).
 */
export function createCatalogActivities(catalog: CatalogSource, client: Client, catalogKeyFile?: string) {
  return {
    async resolveDeployment(request: ResolveRequest): Promise<{
      snapshot: ProfileSnapshot;
      maxReplicas: number;
      drainGraceSeconds: number;
      drainTimeoutSeconds: number;
      /** The catalog's autoscaling for this profile (profile, else model, else defaults). */
      autoscale?: AutoscaleSettings;
    }> {
      const current = catalog.get();
      const choice = chooseProfile(current, request.model, { profile: request.profile, gpuClass: request.gpuClass });
      if (!choice.ok) throw ApplicationFailure.nonRetryable(choice.message, choice.failureType);
      const { model, profile } = choice;
      // A profile whose GPU class no host has would wait for ever as Unschedulable; say so now.
      // A node whose agent has registered but whose workflow has not yet published its class
      // (the control worker just started, say) is not evidence either way: wait for it briefly.
      let fleet = await describeFleet(client);
      for (
        const deadline = Date.now() + UNDESCRIBED_WAIT_MS;
        !fleet.classes.includes(profile.gpuClass) && fleet.undescribed > 0 && Date.now() < deadline;
      ) {
        await sleep(500);
        fleet = await describeFleet(client);
      }
      if (!fleet.classes.includes(profile.gpuClass)) {
        const pending =
          fleet.undescribed > 0
            ? `; ${fleet.undescribed} registered node(s) not yet described after ${UNDESCRIBED_WAIT_MS / 1000} s: is the control worker running?`
            : '';
        throw ApplicationFailure.nonRetryable(
          `profile ${profile.name} of model ${model.name} needs ${profile.gpuClass} GPUs and no registered node has them (fleet: ${fleet.classes.join(', ') || 'no nodes registered'}${pending})`,
          FailureType.UnknownGpuClass,
        );
      }
      // A moving ref becomes the commit it names now: part of the revision, and so signed.
      const modelSource = await pinOrKeep(model.source, request.keepPin);
      const snapshot = {
        ...profileSnapshot(model, profile),
        modelSource,
        ...(modelSource !== model.source ? { sourceAsWritten: model.source } : {}),
      };
      return {
        snapshot:
          catalogKeyFile === undefined ? withRevision(snapshot) : signSnapshot(withRevision(snapshot), readCatalogKeys(catalogKeyFile)),
        maxReplicas: current.defaults?.maxReplicas ?? 256,
        drainGraceSeconds: current.defaults?.drainGraceSeconds ?? 5,
        drainTimeoutSeconds: current.defaults?.drainTimeoutSeconds ?? 600,
        ...((profile.autoscale ?? model.autoscale ?? current.defaults?.autoscale)
          ? { autoscale: profile.autoscale ?? model.autoscale ?? current.defaults?.autoscale }
          : {}),
      };
    },

    /** Whether the model and profile are still in the catalog (reconciliation). */
    async profileInCatalog(request: { model: string; profile: string }): Promise<boolean> {
      const model = catalog.get().models.find((m) => m.name === request.model);
      return Boolean(model?.profiles.some((p) => p.name === request.profile));
    },
  };
}

/** How long resolveDeployment waits for registered nodes to publish their GPU class. */
const UNDESCRIBED_WAIT_MS = 10_000;

/** The GPU classes running node workflows publish, and how many have published none yet. */
async function describeFleet(client: Client): Promise<{ classes: string[]; undescribed: number }> {
  const classes = new Set<string>();
  let undescribed = 0;
  for await (const execution of client.workflow.list({ query: `WorkflowType = 'node' AND ExecutionStatus = 'Running'` })) {
    const value = execution.searchAttributes?.LlmgwGpuClass;
    if (Array.isArray(value) && typeof value[0] === 'string') classes.add(value[0]);
    else undescribed++;
  }
  return { classes: [...classes].sort(), undescribed };
}
