// What the agent spawns an engine with and what it refuses: the profile cannot override the GPUs or
// markers, and specs that can never start fail as non-retryable InvalidSpec, saying why.
import { create } from '@bufbuild/protobuf';
import { describe, expect, it } from 'vitest';
import { buildEngineLaunch } from '../../agent/engines/index.js';
import { FailureType } from '../../common/failures.js';
import { Engine, StartShardSchema } from '../../proto/gen/llmgw/v1/shard_pb.js';
import { ctx, expectInvalidSpec, MARKERS, shard, twoNode, type ProfileInit } from '../helpers/engine-launch.js';
import { failureOf } from '../helpers/failures.js';

describe('engine environment', () => {
  it('does not let the profile override the GPUs or the markers', () => {
    const spec = shard(
      {
        engine: Engine.FAKE,
        env: {
          CUDA_VISIBLE_DEVICES: '0,1,2,3,4,5,6,7',
          LLMGW_NODE_ID: 'someone-else',
          LLMGW_SHARD_ID: 'forged',
          LLMGW_REPLICA_ID: 'forged',
          NCCL_DEBUG: 'INFO',
        },
      },
      { gpuIndices: [5] },
    );
    const env = buildEngineLaunch(spec, ctx()).processes[0]?.env;
    expect(env).toEqual({ NCCL_DEBUG: 'INFO', CUDA_DEVICE_ORDER: 'PCI_BUS_ID', CUDA_VISIBLE_DEVICES: '5', ...MARKERS });
  });

  it('hides every GPU from a shard that was given none', () => {
    const env = buildEngineLaunch(shard({ engine: Engine.FAKE, gpusPerNode: 0 }, { gpuIndices: [] }), ctx()).processes[0]?.env;
    expect(env?.CUDA_VISIBLE_DEVICES).toBe('');
    expect(env).not.toHaveProperty('NCCL_IB_HCA');
    expect(env).not.toHaveProperty('NCCL_SOCKET_IFNAME');
  });
});

describe('specs that can never start', () => {
  it('refuses an unknown engine as a non-retryable InvalidSpec naming the valid ones', () => {
    const failure = failureOf(() => buildEngineLaunch(shard({ engine: 42 as Engine }), ctx()));
    expect(failure.type).toBe(FailureType.InvalidSpec);
    expect(failure.nonRetryable).toBe(true);
    expect(failure.message).toContain('llama-3-r0');
    expect(failure.message).toContain('42');
    expect(failure.message).toContain('vllm, sglang, fake');
  });

  it('refuses a profile that names no engine', () => {
    expectInvalidSpec(
      () => buildEngineLaunch(shard({ engine: Engine.UNSPECIFIED }), ctx()),
      /llama-3-r0.*names no engine.*vllm, sglang, fake/,
    );
  });

  it('refuses a GPU count that does not match the profile', () => {
    expectInvalidSpec(
      () => buildEngineLaunch(shard({ engine: Engine.VLLM, tensorParallel: 4, gpusPerNode: 4 }, { gpuIndices: [0, 1] }), ctx()),
      /needs 4 GPU\(s\) per node but the shard was given 2/,
    );
  });

  it('refuses a rank outside the replica', () => {
    expectInvalidSpec(
      () => buildEngineLaunch(shard({ engine: Engine.FAKE, nodes: 2 }, { ...twoNode(2, [0]) }), ctx()),
      /rank 2 is out of range for 2 node/,
    );
  });

  it('refuses a multi-node shard without a leader', () => {
    const profile: ProfileInit = { engine: Engine.SGLANG, nodes: 2 };
    expectInvalidSpec(() => buildEngineLaunch(shard(profile, { ...twoNode(1, [0]), leaderAddress: '' }), ctx()), /leader address/);
    expectInvalidSpec(() => buildEngineLaunch(shard(profile, { ...twoNode(1, [0]), leaderPort: 0 }), ctx()), /leader port/);
  });

  it('refuses a node count that disagrees with the profile', () => {
    expectInvalidSpec(() => buildEngineLaunch(shard({ engine: Engine.FAKE, nodes: 2 }), ctx()), /1 node\(s\) but profile h100 needs 2/);
  });

  it('refuses an empty model source or served name', () => {
    expectInvalidSpec(() => buildEngineLaunch(shard({ engine: Engine.VLLM, modelSource: '' }), ctx()), /empty model source/);
    expectInvalidSpec(() => buildEngineLaunch(shard({ engine: Engine.VLLM, servedName: ' ' }), ctx()), /empty served name/);
  });

  it('refuses rank 0 without an HTTP port', () => {
    expectInvalidSpec(() => buildEngineLaunch(shard({ engine: Engine.VLLM }), ctx({ httpPort: 0 })), /rank 0 serves HTTP and needs a port/);
  });

  it('refuses a spec without a profile', () => {
    const spec = create(StartShardSchema, { shardId: 's1', replicaId: 'replica/x/1' });
    expectInvalidSpec(() => buildEngineLaunch(spec, ctx()), /s1.*no engine profile/);
  });
});
