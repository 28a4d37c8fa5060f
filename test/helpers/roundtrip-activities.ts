// The activity side of the contract test: turns a StartShard into the RunningShard an
// agent would report for it.
import { create } from '@bufbuild/protobuf';
import {
  RunningShardSchema,
  ShardState,
  ShardStatusSchema,
  type RunningShard,
  type StartShard,
} from '../../proto/gen/llmgw/v1/shard_pb.js';

export async function echoShardAsRunning(spec: StartShard): Promise<RunningShard> {
  return create(RunningShardSchema, {
    spec,
    startTicks: '123456789',
    adopted: false,
    status: create(ShardStatusSchema, {
      shardId: spec.shardId,
      replicaId: spec.replicaId,
      nodeId: spec.nodeId,
      state: ShardState.READY,
      pid: 4242,
      httpPort: spec.httpPort,
      endpoint: `127.0.0.1:${spec.httpPort}`,
      rank: spec.rank,
      gpuIndices: spec.gpuIndices,
    }),
  });
}
