// Building StartShard specs for tests, the way the replica workflow will: profiles signed
// with the run's catalog key, as the control worker signs what it resolves, and a placement
// ticket for what the spec says.
import { create } from '@bufbuild/protobuf';
import { Engine, EngineProfileSchema, Launcher, StartShardSchema, type StartShard } from '../../proto/gen/llmgw/v1/shard_pb.js';
import { shardId as makeShardId } from '../../common/names.js';
import { placeWithTestKey, signWithTestKey } from './catalog-key.js';

export function fakeShardSpec(options: {
  nodeId: string;
  deployment: string;
  seq?: number;
  rank?: number;
  gpus: number[];
  args?: string[];
  engine?: Engine;
}): StartShard {
  const replicaId = `replica/${options.deployment}/${options.seq ?? 1}`;
  const rank = options.rank ?? 0;
  const spec = create(StartShardSchema, {
    replicaId,
    shardId: makeShardId(replicaId, rank, 1),
    deployment: options.deployment,
    rank,
    nnodes: 1,
    gpuIndices: options.gpus,
    nodeId: options.nodeId,
    notifyWorkflowId: replicaId,
    startupTimeoutSeconds: 30,
    profile: signWithTestKey(
      create(EngineProfileSchema, {
        name: 'fake-test',
        engine: options.engine ?? Engine.FAKE,
        model: 'demo',
        modelSource: 'llmgw/fake-demo',
        servedName: options.deployment,
        gpuClass: 'H100',
        tensorParallel: options.gpus.length,
        pipelineParallel: 1,
        gpusPerNode: options.gpus.length,
        nodes: 1,
        args: options.args ?? ['--load-time', '1'],
        launcher: Launcher.NATIVE,
        startupTimeoutSeconds: 30,
      }),
    ),
  });
  // Placed by the control worker for this replica: sent from a workflow of the replica's id.
  return placeWithTestKey(spec);
}
