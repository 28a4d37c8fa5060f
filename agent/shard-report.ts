// Reconciliation driven by change: the agent tells its node workflow which shards it runs
// whenever that set changes (looked at locally every few seconds, and after every transition),
// and the node reconciles only when the set stays different from what it holds. Nothing
// reaches Temporal while the set is steady; a slow Schedule sweep catches the rest.
import type { RunningShard } from '../proto/gen/llmgw/v1/shard_pb.js';
import { ShardState } from '../proto/gen/llmgw/v1/shard_pb.js';

const CHECK_EVERY_MS = 15_000;
const AFTER_TRANSITION_MS = 1_000;

/** The shard ids whose engine runs (or is starting), sorted: the report's whole content. */
export function runningShardIds(shards: RunningShard[]): string[] {
  return shards
    .filter((s) => s.spec && s.status && s.status.state !== ShardState.STOPPED && s.status.state !== ShardState.FAILED)
    .map((s) => s.spec!.shardId)
    .sort();
}

export interface ShardReporter {
  /** A transition happened: look again shortly. */
  changed(): void;
  /** The node registered (it has the full report): start from what it was told. */
  registered(shardIds: string[]): void;
  close(): void;
}

export function createShardReporter(deps: {
  list(): RunningShard[];
  send(shardIds: string[]): Promise<void>;
  log(line: string): void;
}): ShardReporter {
  let sent: string | undefined;
  let soon: NodeJS.Timeout | undefined;
  const check = (): void => {
    const ids = runningShardIds(deps.list());
    const key = ids.join(',');
    if (sent === undefined || key === sent) return;
    const previous = sent;
    sent = key;
    deps.send(ids).catch((error: unknown) => {
      sent = previous;
      deps.log(`could not report running shards: ${error instanceof Error ? error.message : String(error)}`);
    });
  };
  const timer = setInterval(check, CHECK_EVERY_MS);
  timer.unref();
  return {
    changed() {
      if (soon) clearTimeout(soon);
      soon = setTimeout(check, AFTER_TRANSITION_MS);
      soon.unref();
    },
    registered(shardIds) {
      sent = [...shardIds].sort().join(',');
    },
    close() {
      clearInterval(timer);
      if (soon) clearTimeout(soon);
    },
  };
}
