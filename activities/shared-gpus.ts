// The control worker's side of GPUs shared by sleepers (docs/sleep.md, "Sharing GPUs"): a
// replica's wake asks each node for a permit and says when its engines fell asleep (the node's
// `awake` Update, MAC'd like release), and asks the awake holder of a full GPU to sleep (its
// `sleepReplica` Update): activities, since workflow code cannot call an Update. Control side.
import type { Client } from '@temporalio/client';
import { nodeWorkflowId } from '../common/names.js';
import type { AwakeResult } from '../common/node-types.js';
import { awakeUpdate, sleepReplicaUpdate } from '../workflows/definitions.js';
import { wakeWaitersFor } from './capacity.js';
import { signedNodeRequest } from './node-requests.js';

/** What a holder asked to sleep answered: asleep, or why not and (for minAwakeSeconds) when to ask again. */
export type SleepAsked = { slept: true } | { slept: false; why: string; askAgainAt?: string };

/** The refusal of a replica woken less than minAwakeSeconds ago names when it may be asked again (workflows/replica/sleep-rules.ts). */
const ASK_AGAIN = /ask again after (\d{4}-\d\d-\d\dT[\d:.]+Z)/;

/** When a sleepReplica refusal says to ask again (minAwakeSeconds), if it says so. */
export function askAgainAt(why: string): string | undefined {
  return ASK_AGAIN.exec(why)?.[1];
}

export function createSharedGpuActivities(client: Client, catalogKeyFile: string | undefined) {
  return {
    /**
     * A replica's sharing shards ask to wake (`awake`), or say they fell asleep: each node's `awake`
     * Update, all at once, in one activity (a replica's wake or sleep costs one call, not one per rank).
     */
    async askAwake(request: { shards: { nodeId: string; shardId: string }[]; awake: boolean }): Promise<AwakeResult[]> {
      const answers = await Promise.all(
        request.shards.map(({ nodeId, shardId }) =>
          client.workflow.getHandle(nodeWorkflowId(nodeId)).executeUpdate(awakeUpdate, {
            args: [signedNodeRequest(catalogKeyFile, nodeId, 'awake', { shardId, awake: request.awake })],
          }),
        ),
      );
      // A share given back is room for a sharer waiting Unschedulable: wake it now, not at its next look.
      if (!request.awake)
        await Promise.all(
          [...new Set(request.shards.map((s) => s.nodeId))].map((nodeId) => wakeWaitersFor(client, nodeId).catch(() => [])),
        );
      return answers;
    },

    /** Asks the awake replica holding a GPU another must wake onto to sleep, at its profile's level. */
    async askToSleepFor(request: { replicaId: string; by: string; reason: string }): Promise<SleepAsked> {
      try {
        await client.workflow.getHandle(request.replicaId).executeUpdate(sleepReplicaUpdate, {
          args: [{ by: request.by, reason: request.reason }],
        });
        return { slept: true };
      } catch (error) {
        // An Update's refusal arrives wrapped; its cause says why (minAwakeSeconds, already asleep, waking).
        const cause = error instanceof Error && error.cause instanceof Error ? error.cause : error;
        const why = cause instanceof Error ? cause.message : String(cause);
        const again = askAgainAt(why);
        return { slept: false, why, ...(again ? { askAgainAt: again } : {}) };
      }
    },
  };
}
