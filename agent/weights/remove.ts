// `llmgw weights rm`'s activity on the host's queue: removes revisions of a repository from the
// host cache, refusing (and removing nothing) when a shard on the host runs one or a fetch of
// it is under way. Agent side.
import { ApplicationFailure } from '@temporalio/activity';
import type { RunningShard } from '../../proto/gen/llmgw/v1/shard_pb.js';
import { FailureType } from '../../common/failures.js';
import { listManifests } from './manifest.js';
import type { HostWeightsCache } from './host-cache.js';
import { formatBytes } from './progress.js';
import { heldWeightsOf } from './weights-report.js';

export interface RemoveWeightsInput {
  /** ORG/NAME, as `llmgw weights ls` lists it. */
  repo: string;
  /** A commit or a prefix of one; every revision of the repository when absent. */
  commit?: string;
}

export interface RemoveWeightsResult {
  removed: { source: string; bytes: number }[];
}

export function createRemoveWeightsActivity(cache: HostWeightsCache, runningShards: () => RunningShard[], changed: () => void) {
  return {
    async removeWeights(input: RemoveWeightsInput): Promise<RemoveWeightsResult> {
      const repo = input.repo.replace(/^hf:\/\//, '');
      const manifests = listManifests(cache.weightsDir).filter(
        (m) => m.repo === repo && (input.commit === undefined || m.commit.startsWith(input.commit)),
      );
      const what = `${repo}${input.commit ? `@${input.commit}` : ''}`;
      if (!manifests.length) {
        throw ApplicationFailure.nonRetryable(
          `this host holds no ${what} (\`llmgw weights ls\` lists what it holds)`,
          FailureType.InvalidInput,
        );
      }
      const shards = runningShards();
      const held = heldWeightsOf(cache, shards);
      const busy = manifests.flatMap((m) => {
        const users = held.find((h) => h.repo === m.repo && h.commit === m.commit)?.inUseBy ?? [];
        const fetching = cache.fetching(m.repo, m.commit);
        if (!users.length && !fetching) return [];
        const replicas = users.map((shardId) => {
          const replicaId = shards.find((s) => s.spec?.shardId === shardId)?.spec?.replicaId;
          return `shard ${shardId}${replicaId ? ` (${replicaId})` : ''}`;
        });
        return [`${m.repo}@${m.commit.slice(0, 12)} is ${fetching ? 'being fetched' : `in use by ${replicas.join(', ')}`}`];
      });
      if (busy.length) {
        throw ApplicationFailure.nonRetryable(
          `not removed: ${busy.join('; ')}. Scale down, undeploy or roll that deployment to another revision first, then run this again`,
          FailureType.InvalidInput,
        );
      }
      const removed: RemoveWeightsResult['removed'] = [];
      for (const m of manifests) {
        // Listed afresh each time: blobs another revision still links stay.
        await cache.evict(m);
        cache.options.log(`weights: removed ${m.repo}@${m.commit.slice(0, 12)} (${formatBytes(m.bytesTotal)}) by hand`);
        removed.push({ source: `hf://${m.repo}@${m.commit}`, bytes: m.bytesTotal });
      }
      changed();
      return { removed };
    },
  };
}
