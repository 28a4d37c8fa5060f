// Building blocks for the engine launch tests: a StartShard for a profile, the agent's engine
// context, the markers every engine gets, two-node shard fields, and the InvalidSpec check.
import { create, type MessageInitShape } from '@bufbuild/protobuf';
import { expect } from 'vitest';
import type { EngineContext } from '../../agent/engines/index.js';
import { FailureType } from '../../common/failures.js';
import { EngineProfileSchema, StartShardSchema, type StartShard } from '../../proto/gen/llmgw/v1/shard_pb.js';
import { failureOf } from './failures.js';

export const FAKE_CMD = ['/usr/bin/node', '/opt/llmgw/bin/llmgw.js', 'fake-engine'];

export function ctx(over: Partial<EngineContext> = {}): EngineContext {
  return { advertiseAddress: '10.0.0.5', httpPort: 18000, fakeEngineCommand: FAKE_CMD, ...over };
}

export type ProfileInit = MessageInitShape<typeof EngineProfileSchema>;
export type ShardFields = Omit<Partial<StartShard>, '$typeName' | 'profile'>;

export function shard(profile: ProfileInit, over: ShardFields = {}): StartShard {
  return create(StartShardSchema, {
    replicaId: 'replica/llama/3',
    shardId: 'llama-3-r0',
    deployment: 'llama',
    rank: 0,
    nnodes: 1,
    gpuIndices: [0],
    nodeId: 'gpu-a',
    profile: create(EngineProfileSchema, {
      name: 'h100',
      modelSource: 'meta-llama/Llama-3.1-8B-Instruct',
      servedName: 'llama',
      tensorParallel: 1,
      pipelineParallel: 1,
      gpusPerNode: 1,
      nodes: 1,
      ...profile,
    }),
    ...over,
  });
}

export const MARKERS = { LLMGW_NODE_ID: 'gpu-a', LLMGW_SHARD_ID: 'llama-3-r0', LLMGW_REPLICA_ID: 'replica/llama/3' };

export function expectInvalidSpec(fn: () => unknown, message: RegExp): void {
  const failure = failureOf(fn);
  expect(failure.type).toBe(FailureType.InvalidSpec);
  expect(failure.nonRetryable).toBe(true);
  expect(failure.message).toMatch(message);
}

export const twoNode = (rank: number, gpus: number[]): ShardFields => ({
  rank,
  nnodes: 2,
  shardId: `llama-3-r${rank}`,
  nodeId: rank === 0 ? 'gpu-a' : 'gpu-b',
  leaderAddress: '10.0.0.5',
  leaderPort: 6379,
  gpuIndices: gpus,
});

/** The launch of one engine process that serves HTTP and is health-checked at /health. */
export const oneServingEngine = (argv: string[], env: Record<string, string>) => ({
  servesHttp: true,
  healthPath: '/health',
  processes: [{ role: 'engine', blocking: true, argv, env }],
});
