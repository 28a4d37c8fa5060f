// Fetching a revision's weights onto hosts without placing anything: the `weightsPrefetch`
// workflow behind `llmgw weights prefetch` (weights/prefetch/<id>), and the step a rollout
// takes before it drains (deploy-model/rollout-steps.ts). Each host's fetchWeights heartbeats
// its progress, which the CLI and the Web UI show. Workflow side.
import { ActivityFailure, ApplicationFailure, setCurrentDetails } from '@temporalio/workflow';
import { FailureType } from '../../common/failures.js';
import { isFetched, modelSourceOf } from '../../common/model-source.js';
import { fetchOn } from '../replica/fetch.js';
import { controlActivities } from '../toolkit.js';
import type { ProfileSnapshot } from '../../common/replica-types.js';

export interface WeightsPrefetchInput {
  /** A catalog model; its profile's source is resolved (pinned) when `modelSource` is absent. */
  model: string;
  profile?: string;
  /** The pinned source to fetch (a running deployment's, so the hosts get what its replicas run). */
  modelSource?: string;
  /** The catalog's source as written when `modelSource` was pinned from it: the catalog signs that pin again. */
  sourceAsWritten?: string;
  /** The hosts; absent: every Ready node of `gpuClass` (or of the profile's GPU class). */
  nodes?: string[];
  gpuClass?: string;
}

export interface HostFetch {
  nodeId: string;
  ok: boolean;
  bytesFetched?: number;
  bytesTotal?: number;
  seconds?: number;
  error?: string;
}

export interface WeightsPrefetchResult {
  modelSource: string;
  hosts: HostFetch[];
}

/** Fetches a pinned source onto each host at once; never throws for one host's failure. */
export async function prefetchOnHosts(
  modelSource: string,
  nodes: string[],
  who: string,
  /** The signed revision naming `modelSource`: an agent with a catalog key fetches for nothing else. */
  profile?: ProfileSnapshot,
): Promise<HostFetch[]> {
  // A signature never expires: each host also needs a permit the control worker signs only while
  // the revision is live (activities/weights-permits.ts). Both callers are Pinned (a run of an
  // earlier build keeps its code, so no patch): a 0.2.0 run fetches without, and 0.3.0 agents refuse it.
  let permits: Record<string, string> = {};
  if (profile) {
    try {
      permits = await controlActivities(`signWeightsPermits: may ${nodes.join(', ')} fetch ${modelSource} now`, {
        retry: { maximumAttempts: 3, nonRetryableErrorTypes: [FailureType.UnsignedRevision] },
      }).signWeightsPermits({ nodes, profile });
    } catch (error) {
      const cause = error instanceof ActivityFailure ? (error.cause ?? error) : error;
      const why = cause instanceof Error ? cause.message : String(cause);
      return nodes.map((nodeId) => ({ nodeId, ok: false, error: why }));
    }
  }
  return Promise.all(
    nodes.map(async (nodeId): Promise<HostFetch> => {
      try {
        const permit = permits[nodeId];
        const result = await fetchOn(nodeId, `fetchWeights ${modelSource} on ${nodeId} (${who})`, 24 * 3600).fetchWeights({
          modelSource,
          replicaId: who,
          ...(profile ? { profile } : {}),
          ...(permit ? { permit } : {}),
        });
        return { nodeId, ok: true, bytesFetched: result.bytesFetched, bytesTotal: result.bytesTotal, seconds: result.seconds };
      } catch (error) {
        const cause = error instanceof ActivityFailure ? (error.cause ?? error) : error;
        return { nodeId, ok: false, error: cause instanceof Error ? cause.message : String(cause) };
      }
    }),
  );
}

export async function weightsPrefetch(input: WeightsPrefetchInput): Promise<WeightsPrefetchResult> {
  let modelSource = input.modelSource;
  let gpuClass = input.gpuClass;
  // Always resolved: the agents fetch only for a revision the control worker signed. A
  // deployment's pin is kept (keepPin) while the catalog's source is still the one it came from.
  let signed: ProfileSnapshot | undefined;
  try {
    const keepPin = input.modelSource
      ? { modelSource: input.modelSource, ...(input.sourceAsWritten ? { sourceAsWritten: input.sourceAsWritten } : {}) }
      : undefined;
    const resolved = await controlActivities(`resolveDeployment: the pinned source of ${input.model}`, {
      retry: { maximumAttempts: 3, nonRetryableErrorTypes: [FailureType.UnknownModel, FailureType.UnknownProfile] },
    }).resolveDeployment({ model: input.model, ...(input.profile ? { profile: input.profile } : {}), ...(keepPin ? { keepPin } : {}) });
    modelSource ??= resolved.snapshot.modelSource;
    gpuClass ??= resolved.snapshot.gpuClass;
    // A pin the catalog no longer names has no signed revision: the agents refuse it, saying so.
    if (resolved.snapshot.modelSource === modelSource) signed = resolved.snapshot;
  } catch (error) {
    const cause = error instanceof ActivityFailure ? (error.cause ?? error) : error;
    throw ApplicationFailure.nonRetryable(cause instanceof Error ? cause.message : String(cause), FailureType.InvalidInput);
  }
  if (!isFetched(modelSource ? modelSourceOf(modelSource) : { kind: 'engine', name: '' })) {
    throw ApplicationFailure.nonRetryable(
      `${input.model}'s source ${modelSource} is not fetched by llmgw (only hf:// and s3:// sources are): nothing to prefetch`,
      FailureType.InvalidInput,
    );
  }
  const nodes = input.nodes?.length
    ? input.nodes
    : await controlActivities(`readyNodesOfClass: the Ready ${gpuClass} nodes`).readyNodesOfClass({ gpuClass: gpuClass! });
  if (!nodes.length) throw ApplicationFailure.nonRetryable(`no Ready ${gpuClass} node to prefetch onto`, FailureType.InvalidInput);
  setCurrentDetails(`Prefetching \`${modelSource}\` onto ${nodes.join(', ')}: each host's fetchWeights shows its progress`);
  const hosts = await prefetchOnHosts(modelSource!, nodes, `prefetch of ${input.model}`, signed);
  setCurrentDetails(
    `Prefetched \`${modelSource}\`: ${hosts.map((h) => `${h.nodeId} ${h.ok ? 'done' : `failed (${h.error})`}`).join('; ')}`,
  );
  return { modelSource: modelSource!, hosts };
}
