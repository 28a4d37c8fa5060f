// A workflow used only by the contract test: it hands a StartShard (a protobuf-es
// message) to an activity and returns the RunningShard it gets back, so the test can
// check what Temporal stored in history.
import { proxyActivities } from '@temporalio/workflow';
import type { StartShard, RunningShard } from '../../proto/gen/llmgw/v1/shard_pb.js';
import type * as activities from '../helpers/roundtrip-activities.js';

const { echoShardAsRunning } = proxyActivities<typeof activities>({ startToCloseTimeout: '10 seconds' });

export async function shardRoundTrip(spec: StartShard): Promise<RunningShard> {
  return await echoShardAsRunning(spec);
}
