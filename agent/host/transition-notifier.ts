// Tells replica workflows about their shards' transitions (ready, unhealthy, exited) as
// signals. Only transitions travel, so a Ready engine costs Temporal nothing; when
// Temporal is unreachable the latest transition per shard waits and is sent later.
import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import type { ShardStatus } from '../../proto/gen/llmgw/v1/shard_pb.js';
import { shardTransitionSignal } from '../../workflows/definitions.js';

export interface TransitionNotifier {
  send(status: ShardStatus): void;
  close(): void;
}

export function createTransitionNotifier(client: () => Client | undefined, log: (line: string) => void): TransitionNotifier {
  const pending = new Map<string, ShardStatus>();
  let flushing = false;

  const flush = async (): Promise<void> => {
    if (flushing) return;
    flushing = true;
    try {
      for (const [shardId, status] of [...pending]) {
        const current = client();
        if (!current) return;
        try {
          await current.workflow.getHandle(status.replicaId).signal(shardTransitionSignal, status);
          if (pending.get(shardId) === status) pending.delete(shardId);
        } catch (error) {
          if (error instanceof WorkflowNotFoundError) {
            // No replica wants to hear about it; reconciliation decides what to do with it.
            log(`transition of ${shardId} not delivered: replica workflow ${status.replicaId} is not running`);
            pending.delete(shardId);
          } else {
            return; // Temporal unreachable: keep it for the next flush.
          }
        }
      }
    } finally {
      flushing = false;
    }
  };

  const timer = setInterval(() => void flush(), 2_000);
  timer.unref();
  return {
    send(status) {
      if (!status.replicaId) return;
      pending.set(status.shardId, status);
      void flush();
    },
    close() {
      clearInterval(timer);
    },
  };
}
