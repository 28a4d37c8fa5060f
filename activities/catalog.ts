// Catalog activities: turn a deploy request into the profile snapshot a replica runs,
// or a non-retryable failure that names the problem and the valid choices.
import { ApplicationFailure, type Client } from '@temporalio/client';
import type { CatalogSource } from '../catalog/watch.js';
import { chooseProfile, profileSnapshot } from '../catalog/lookup.js';
import { FailureType } from '../common/failures.js';
import type { ProfileSnapshot } from '../common/replica-types.js';

export interface ResolveRequest {
  model: string;
  profile?: string;
  gpuClass?: string;
}

export function createCatalogActivities(catalog: CatalogSource, client: Client) {
  return {
    async resolveDeployment(request: ResolveRequest): Promise<{ snapshot: ProfileSnapshot; maxReplicas: number; drainGraceSeconds: number }> {
      const current = catalog.get();
      const choice = chooseProfile(current, request.model, { profile: request.profile, gpuClass: request.gpuClass });
      if (!choice.ok) throw ApplicationFailure.nonRetryable(choice.message, choice.failureType);
      const { model, profile } = choice;
      // A profile whose GPU class no host has would wait for ever as Unschedulable; say so now.
      const classes = await gpuClassesInFleet(client);
      if (!classes.includes(profile.gpuClass)) {
        throw ApplicationFailure.nonRetryable(
          `profile ${profile.name} of model ${model.name} needs ${profile.gpuClass} GPUs and no registered node has them (fleet: ${classes.join(', ') || 'no nodes registered'})`,
          FailureType.UnknownGpuClass,
        );
      }
      return {
        snapshot: profileSnapshot(model, profile),
        maxReplicas: current.defaults?.maxReplicas ?? 256,
        drainGraceSeconds: current.defaults?.drainGraceSeconds ?? 5,
      };
    },

    /** Whether the model and profile are still in the catalog (reconciliation). */
    async profileInCatalog(request: { model: string; profile: string }): Promise<boolean> {
      const model = catalog.get().models.find((m) => m.name === request.model);
      return Boolean(model?.profiles.some((p) => p.name === request.profile));
    },
  };
}

async function gpuClassesInFleet(client: Client): Promise<string[]> {
  const classes = new Set<string>();
  for await (const execution of client.workflow.list({ query: `WorkflowType = 'node' AND ExecutionStatus = 'Running'` })) {
    const value = execution.searchAttributes?.LlmgwGpuClass;
    if (Array.isArray(value) && typeof value[0] === 'string') classes.add(value[0]);
  }
  return [...classes].sort();
}
