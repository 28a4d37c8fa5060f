// The agent's weights part, assembled from its flags: the host cache (with the shards in use,
// which are never evicted) and the activities it serves on the host's queue. Agent side.
import { chmodSync, mkdirSync } from 'node:fs';
import type { RunningShard } from '../../proto/gen/llmgw/v1/shard_pb.js';
import type { LineLog } from '../../common/logger.js';
import type { AgentConfig } from '../config.js';
import { createWeightsActivities } from './activity.js';
import { HostWeightsCache } from './host-cache.js';
import { createRemoveWeightsActivity } from './remove.js';
import { createFetchCheck } from './fetch-check.js';
import type { RevisionPolicy } from '../revision-check.js';

export function createHostWeights(
  config: Pick<AgentConfig, 'weightsDir' | 'weightsBudget'> & { nodeId?: string },
  runningShards: () => RunningShard[],
  log: LineLog,
  /** Told when what the cache holds may have changed (the host's report, weights-report.ts). */
  changed: () => void = () => undefined,
  /** Which revisions this agent fetches for: the one its starts obey (fetch-check.ts). */
  revisionPolicy: RevisionPolicy = { kind: 'no-key' },
): {
  cache: HostWeightsCache;
  activities: ReturnType<typeof createWeightsActivities> & ReturnType<typeof createRemoveWeightsActivity>;
} {
  mkdirSync(config.weightsDir, { recursive: true });
  // Engines run as an unprivileged user (--engine-user) and read their snapshot from here.
  chmodSync(config.weightsDir, 0o755);
  const cache = new HostWeightsCache({
    weightsDir: config.weightsDir,
    ...(config.weightsBudget ? { budget: config.weightsBudget } : {}),
    sourcesInUse: () => runningShards().flatMap((shard) => (shard.spec?.profile?.modelSource ? [shard.spec.profile.modelSource] : [])),
    log,
    ...(config.nodeId ? { who: `the agent on ${config.nodeId}` } : {}),
  });
  const fetching = createWeightsActivities(cache, (line) => log(line));
  const checkFetch = createFetchCheck(revisionPolicy, config.nodeId);
  return {
    cache,
    activities: {
      async fetchWeights(input) {
        // Before the cache is touched: an unsigned fetch writes nothing here.
        checkFetch(input);
        try {
          return await fetching.fetchWeights(input);
        } finally {
          changed();
        }
      },
      ...createRemoveWeightsActivity(cache, runningShards, changed),
    },
  };
}
