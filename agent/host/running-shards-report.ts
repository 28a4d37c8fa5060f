// Reconciliation driven by change: the agent tells its node workflow which shards it runs
// whenever that set changes (looked at locally every few seconds, and after every transition),
// and the node reconciles only when the set stays different from what it holds. Nothing
// reaches Temporal while the set is steady; a slow Schedule sweep catches the rest. Sent by
// node-signals.ts through change-report.ts.
import type { RunningShard } from '../../proto/gen/llmgw/v1/shard_pb.js';
import { ShardState } from '../../proto/gen/llmgw/v1/shard_pb.js';

/** The shard ids whose engine runs (or is starting), sorted: the report's whole content. */
export function runningShardIds(shards: RunningShard[]): string[] {
  return shards
    .filter((s) => s.spec && s.status && s.status.state !== ShardState.STOPPED && s.status.state !== ShardState.FAILED)
    .map((s) => s.spec!.shardId)
    .sort();
}

/** What the report compares: two sets with one key need no signal. */
export function runningShardsKey(shardIds: string[]): string {
  return [...shardIds].sort().join(',');
}
