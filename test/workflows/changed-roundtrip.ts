// A deliberately non-deterministic edit of shardRoundTrip (a timer before the activity),
// used to show that the replay test catches changed commands.
import { proxyActivities, sleep } from '@temporalio/workflow';
import type { StartShard, RunningShard } from '../../proto/gen/llmgw/v1/shard_pb.js';
import type * as activities from '../helpers/roundtrip-activities.js';

const { echoShardAsRunning } = proxyActivities<typeof activities>({ startToCloseTimeout: '10 seconds' });

export async function shardRoundTrip(spec: StartShard): Promise<RunningShard> {
  await sleep('1 second');
  return await echoShardAsRunning(spec);
}
