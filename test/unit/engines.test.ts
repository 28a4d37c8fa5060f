// The command lines and environments the agent spawns for each engine, and the specs it
// refuses: what a real vLLM / SGLang / Ray / fake engine process would be started with.
import { create, type MessageInitShape } from '@bufbuild/protobuf';
import { ApplicationFailure } from '@temporalio/common';
import { interfaceOf } from '../../agent/host.js';
import { describe, expect, it } from 'vitest';
import { parseAgentFlags } from '../../agent/config.js';
import { buildEngineLaunch, parseRayStatusNodeCount, rayStatusArgs, type EngineContext } from '../../agent/engines/index.js';
import { FailureType } from '../../common/failures.js';
import { Engine, EngineProfileSchema, Launcher, StartShardSchema, type StartShard } from '../../proto/gen/llmgw/v1/shard_pb.js';

const FAKE_CMD = ['/usr/bin/node', '/opt/llmgw/bin/llmgw.js', 'fake-engine'];

function ctx(over: Partial<EngineContext> = {}): EngineContext {
  return { advertiseAddress: '10.0.0.5', httpPort: 18000, fakeEngineCommand: FAKE_CMD, ...over };
}

type ProfileInit = MessageInitShape<typeof EngineProfileSchema>;
type ShardFields = Omit<Partial<StartShard>, '$typeName' | 'profile'>;

function shard(profile: ProfileInit, over: ShardFields = {}): StartShard {
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

const MARKERS = { LLMGW_NODE_ID: 'gpu-a', LLMGW_SHARD_ID: 'llama-3-r0', LLMGW_REPLICA_ID: 'replica/llama/3' };

function failureOf(fn: () => unknown): ApplicationFailure {
  try {
    fn();
  } catch (err) {
    if (err instanceof ApplicationFailure) return err;
    throw err;
  }
  throw new Error('expected an ApplicationFailure, nothing was thrown');
}

function expectInvalidSpec(fn: () => unknown, message: RegExp): void {
  const failure = failureOf(fn);
  expect(failure.type).toBe(FailureType.InvalidSpec);
  expect(failure.nonRetryable).toBe(true);
  expect(failure.message).toMatch(message);
}

const twoNode = (rank: number, gpus: number[]): ShardFields => ({
  rank,
  nnodes: 2,
  shardId: `llama-3-r${rank}`,
  nodeId: rank === 0 ? 'gpu-a' : 'gpu-b',
  leaderAddress: '10.0.0.5',
  leaderPort: 6379,
  gpuIndices: gpus,
});

describe('vLLM command lines', () => {
  it('starts a single-GPU vllm serve with exactly its GPU and the markers', () => {
    const launch = buildEngineLaunch(shard({ engine: Engine.VLLM, args: ['--max-model-len', '8192'] }, { gpuIndices: [3] }), ctx());
    expect(launch).toEqual({
      servesHttp: true,
      healthPath: '/health',
      processes: [
        {
          role: 'engine',
          blocking: true,
          argv: [
            'vllm',
            'serve',
            'meta-llama/Llama-3.1-8B-Instruct',
            '--served-model-name',
            'llama',
            '--host',
            '10.0.0.5',
            '--port',
            '18000',
            '--tensor-parallel-size',
            '1',
            '--pipeline-parallel-size',
            '1',
            '--max-model-len',
            '8192',
          ],
          env: { CUDA_DEVICE_ORDER: 'PCI_BUS_ID', CUDA_VISIBLE_DEVICES: '3', VLLM_HOST_IP: '10.0.0.5', ...MARKERS },
        },
      ],
    });
  });

  it("takes the agent's own management interface when the spec names none, and finds it by address", () => {
    const spec = shard({ engine: Engine.VLLM }, { gpuIndices: [0] });
    const [engine] = buildEngineLaunch(spec, ctx({ managementInterface: 'ens3' })).processes;
    expect(engine?.env).toMatchObject({ NCCL_SOCKET_IFNAME: 'ens3', GLOO_SOCKET_IFNAME: 'ens3' });
    const interfaces = { lo: [{ address: '127.0.0.1' }], ens3: [{ address: '10.0.0.5' }] } as unknown as Parameters<typeof interfaceOf>[1];
    expect(interfaceOf('10.0.0.5', interfaces)).toBe('ens3');
    expect(interfaceOf('192.0.2.9', interfaces)).toBeUndefined();
  });

  it('gives a TP4 engine its four GPUs, its HCAs and the management interface', () => {
    const spec = shard(
      { engine: Engine.VLLM, tensorParallel: 4, gpusPerNode: 4, env: { HF_HOME: '/models' } },
      { gpuIndices: [4, 5, 6, 7], hcas: ['mlx5_0', 'mlx5_1'], managementInterface: 'eth0' },
    );
    const [engine] = buildEngineLaunch(spec, ctx({ vllmCommand: ['/opt/venv/bin/vllm'] })).processes;
    expect(engine?.argv).toEqual([
      '/opt/venv/bin/vllm',
      'serve',
      'meta-llama/Llama-3.1-8B-Instruct',
      '--served-model-name',
      'llama',
      '--host',
      '10.0.0.5',
      '--port',
      '18000',
      '--tensor-parallel-size',
      '4',
      '--pipeline-parallel-size',
      '1',
    ]);
    expect(engine?.env).toEqual({
      HF_HOME: '/models',
      CUDA_DEVICE_ORDER: 'PCI_BUS_ID',
      CUDA_VISIBLE_DEVICES: '4,5,6,7',
      NCCL_IB_HCA: 'mlx5_0,mlx5_1',
      NCCL_SOCKET_IFNAME: 'eth0',
      GLOO_SOCKET_IFNAME: 'eth0',
      VLLM_HOST_IP: '10.0.0.5',
      ...MARKERS,
    });
  });

  const rayProfile: ProfileInit = {
    engine: Engine.VLLM,
    launcher: Launcher.RAY,
    tensorParallel: 8,
    pipelineParallel: 2,
    gpusPerNode: 8,
    nodes: 2,
  };

  it('starts a Ray head on rank 0, then vllm serve once both nodes have joined', () => {
    const launch = buildEngineLaunch(shard(rayProfile, twoNode(0, [0, 1, 2, 3, 4, 5, 6, 7])), ctx());
    expect(launch.servesHttp).toBe(true);
    expect(launch.processes.map((p) => p.role)).toEqual(['ray-head', 'engine']);
    const [head, engine] = launch.processes;
    expect(head).toMatchObject({
      argv: ['ray', 'start', '--head', '--port', '6379', '--node-ip-address', '10.0.0.5', '--block'],
      blocking: true,
    });
    expect(head?.waitForRayNodes).toBeUndefined();
    expect(engine).toMatchObject({
      argv: [
        'vllm',
        'serve',
        'meta-llama/Llama-3.1-8B-Instruct',
        '--served-model-name',
        'llama',
        '--host',
        '10.0.0.5',
        '--port',
        '18000',
        '--tensor-parallel-size',
        '8',
        '--pipeline-parallel-size',
        '2',
        '--distributed-executor-backend',
        'ray',
      ],
      waitForRayNodes: 2,
      rayAddress: '10.0.0.5:6379',
      blocking: true,
    });
    expect(head?.env.CUDA_VISIBLE_DEVICES).toBe('0,1,2,3,4,5,6,7');
    expect(engine?.env.VLLM_HOST_IP).toBe('10.0.0.5');
  });

  it('runs only a Ray worker on rank 1, which serves no HTTP', () => {
    const launch = buildEngineLaunch(
      shard(rayProfile, twoNode(1, [0, 1, 2, 3, 4, 5, 6, 7])),
      ctx({ advertiseAddress: '10.0.0.6', httpPort: 0 }),
    );
    expect(launch.servesHttp).toBe(false);
    expect(launch.processes).toEqual([
      {
        role: 'ray-worker',
        blocking: true,
        argv: ['ray', 'start', '--address', '10.0.0.5:6379', '--node-ip-address', '10.0.0.6', '--block'],
        env: {
          CUDA_DEVICE_ORDER: 'PCI_BUS_ID',
          CUDA_VISIBLE_DEVICES: '0,1,2,3,4,5,6,7',
          VLLM_HOST_IP: '10.0.0.6',
          LLMGW_NODE_ID: 'gpu-b',
          LLMGW_SHARD_ID: 'llama-3-r1',
          LLMGW_REPLICA_ID: 'replica/llama/3',
        },
      },
    ]);
  });

  it("keeps Ray's workers on the agent's Ray port range, on the head and on every worker", () => {
    const rayWorkerPorts = { from: 20000, to: 20999 };
    const head = buildEngineLaunch(shard(rayProfile, twoNode(0, [0, 1, 2, 3, 4, 5, 6, 7])), ctx({ rayWorkerPorts })).processes[0];
    const worker = buildEngineLaunch(
      shard(rayProfile, twoNode(1, [0, 1, 2, 3, 4, 5, 6, 7])),
      ctx({ advertiseAddress: '10.0.0.6', httpPort: 0, rayWorkerPorts }),
    ).processes[0];
    for (const process of [head, worker]) {
      expect(process?.argv.slice(-5)).toEqual(['--min-worker-port', '20000', '--max-worker-port', '20999', '--block']);
    }
  });

  it('refuses a Ray worker port range that overlaps the engine ports, naming both flags', () => {
    expect(() => parseAgentFlags({ portRange: '18000-18999', rayWorkerPorts: '10002-19999' })).toThrow(
      /--ray-worker-ports: 10002-19999 overlaps the engine ports 18000-18999 \(--port-range\)/,
    );
    expect(parseAgentFlags({}).rayWorkerPorts).toEqual({ from: 10002, to: 17999 });
    expect(parseAgentFlags({ portRange: '30000-30099' }).rayWorkerPorts).toEqual({ from: 10002, to: 17999 });
  });

  it('refuses multi-node vLLM without Ray', () => {
    expectInvalidSpec(
      () => buildEngineLaunch(shard({ ...rayProfile, launcher: Launcher.NATIVE }, twoNode(0, [0, 1, 2, 3, 4, 5, 6, 7])), ctx()),
      /llama-3-r0.*Ray launcher/,
    );
  });
});

describe('SGLang command lines', () => {
  it('starts sglang.launch_server on one node', () => {
    const launch = buildEngineLaunch(shard({ engine: Engine.SGLANG, tensorParallel: 2, gpusPerNode: 2 }, { gpuIndices: [0, 1] }), ctx());
    expect(launch.servesHttp).toBe(true);
    expect(launch.healthPath).toBe('/health');
    expect(launch.processes).toEqual([
      {
        role: 'engine',
        blocking: true,
        argv: [
          'python3',
          '-m',
          'sglang.launch_server',
          '--model-path',
          'meta-llama/Llama-3.1-8B-Instruct',
          '--served-model-name',
          'llama',
          '--host',
          '10.0.0.5',
          '--port',
          '18000',
          '--tp',
          '2',
        ],
        env: { CUDA_DEVICE_ORDER: 'PCI_BUS_ID', CUDA_VISIBLE_DEVICES: '0,1', ...MARKERS },
      },
    ]);
  });

  const sglang2: ProfileInit = { engine: Engine.SGLANG, tensorParallel: 16, gpusPerNode: 8, nodes: 2, args: ['--trust-remote-code'] };

  it('gives rank 0 of two nodes the dist-init address, and it serves HTTP', () => {
    const launch = buildEngineLaunch(
      shard(sglang2, twoNode(0, [0, 1, 2, 3, 4, 5, 6, 7])),
      ctx({ pythonCommand: ['/opt/sglang/bin/python'] }),
    );
    expect(launch.servesHttp).toBe(true);
    expect(launch.processes.map((p) => p.argv)).toEqual([
      [
        '/opt/sglang/bin/python',
        '-m',
        'sglang.launch_server',
        '--model-path',
        'meta-llama/Llama-3.1-8B-Instruct',
        '--served-model-name',
        'llama',
        '--host',
        '10.0.0.5',
        '--port',
        '18000',
        '--tp',
        '16',
        '--nnodes',
        '2',
        '--node-rank',
        '0',
        '--dist-init-addr',
        '10.0.0.5:6379',
        '--trust-remote-code',
      ],
    ]);
  });

  it('gives rank 1 the same flags with its own rank and port, and does not health-check it', () => {
    const launch = buildEngineLaunch(
      shard(sglang2, twoNode(1, [0, 1, 2, 3, 4, 5, 6, 7])),
      ctx({ advertiseAddress: '10.0.0.6', httpPort: 18004 }),
    );
    expect(launch.servesHttp).toBe(false);
    expect(launch.processes.map((p) => p.argv)).toEqual([
      [
        'python3',
        '-m',
        'sglang.launch_server',
        '--model-path',
        'meta-llama/Llama-3.1-8B-Instruct',
        '--served-model-name',
        'llama',
        '--host',
        '10.0.0.6',
        '--port',
        '18004',
        '--tp',
        '16',
        '--nnodes',
        '2',
        '--node-rank',
        '1',
        '--dist-init-addr',
        '10.0.0.5:6379',
        '--trust-remote-code',
      ],
    ]);
    expect(launch.processes[0]?.env.VLLM_HOST_IP).toBeUndefined();
  });

  it('passes --pp-size only for pipeline parallelism', () => {
    const launch = buildEngineLaunch(shard({ ...sglang2, pipelineParallel: 2 }, twoNode(0, [0, 1, 2, 3, 4, 5, 6, 7])), ctx());
    const argv = launch.processes[0]?.argv ?? [];
    expect(argv[argv.indexOf('--pp-size') + 1]).toBe('2');
  });
});

describe('fake engine command lines', () => {
  it('starts the fake engine with vLLM-style flags on one node', () => {
    const launch = buildEngineLaunch(
      shard({ engine: Engine.FAKE, modelSource: 'demo', servedName: 'demo', args: ['--load-time', '2'] }),
      ctx(),
    );
    expect(launch).toEqual({
      servesHttp: true,
      healthPath: '/health',
      processes: [
        {
          role: 'engine',
          blocking: true,
          argv: [
            ...FAKE_CMD,
            '--model',
            'demo',
            '--served-model-name',
            'demo',
            '--host',
            '10.0.0.5',
            '--port',
            '18000',
            '--tensor-parallel-size',
            '1',
            '--pipeline-parallel-size',
            '1',
            '--load-time',
            '2',
          ],
          env: { CUDA_DEVICE_ORDER: 'PCI_BUS_ID', CUDA_VISIBLE_DEVICES: '0', ...MARKERS },
        },
      ],
    });
  });

  const fake2: ProfileInit = { engine: Engine.FAKE, modelSource: 'demo', servedName: 'demo', tensorParallel: 2, gpusPerNode: 1, nodes: 2 };

  it('gives native rank 0 the leader flags and a port', () => {
    const launch = buildEngineLaunch(shard(fake2, twoNode(0, [0])), ctx());
    expect(launch.servesHttp).toBe(true);
    expect(launch.processes.map((p) => p.argv)).toEqual([
      [
        ...FAKE_CMD,
        '--model',
        'demo',
        '--served-model-name',
        'demo',
        '--host',
        '10.0.0.5',
        '--port',
        '18000',
        '--tensor-parallel-size',
        '2',
        '--pipeline-parallel-size',
        '1',
        '--nnodes',
        '2',
        '--node-rank',
        '0',
        '--leader',
        '10.0.0.5:6379',
      ],
    ]);
  });

  it('gives native rank 1 the leader flags and no port', () => {
    const launch = buildEngineLaunch(shard(fake2, twoNode(1, [1])), ctx({ advertiseAddress: '10.0.0.6', httpPort: 0 }));
    expect(launch.servesHttp).toBe(false);
    expect(launch.processes.map((p) => p.argv)).toEqual([
      [
        ...FAKE_CMD,
        '--model',
        'demo',
        '--served-model-name',
        'demo',
        '--host',
        '10.0.0.6',
        '--tensor-parallel-size',
        '2',
        '--pipeline-parallel-size',
        '1',
        '--nnodes',
        '2',
        '--node-rank',
        '1',
        '--leader',
        '10.0.0.5:6379',
      ],
    ]);
    expect(launch.processes[0]?.env.CUDA_VISIBLE_DEVICES).toBe('1');
  });

  it('stands in for vllm serve on a real Ray cluster', () => {
    const profile = { ...fake2, launcher: Launcher.RAY };
    const rayCommand = ['/opt/ray/bin/ray'];
    const leader = buildEngineLaunch(shard(profile, twoNode(0, [0])), ctx({ rayCommand }));
    expect(leader.servesHttp).toBe(true);
    expect(leader.processes.map((p) => [p.role, p.argv, p.waitForRayNodes])).toEqual([
      ['ray-head', ['/opt/ray/bin/ray', 'start', '--head', '--port', '6379', '--node-ip-address', '10.0.0.5', '--block'], undefined],
      [
        'engine',
        [
          ...FAKE_CMD,
          '--model',
          'demo',
          '--served-model-name',
          'demo',
          '--host',
          '10.0.0.5',
          '--port',
          '18000',
          '--tensor-parallel-size',
          '2',
          '--pipeline-parallel-size',
          '1',
          '--distributed-executor-backend',
          'ray',
        ],
        2,
      ],
    ]);
    // VLLM_HOST_IP is vLLM's; the fake engine's environment carries only ours.
    expect(leader.processes[1]?.env).toEqual({ CUDA_DEVICE_ORDER: 'PCI_BUS_ID', CUDA_VISIBLE_DEVICES: '0', ...MARKERS });

    const worker = buildEngineLaunch(shard(profile, twoNode(1, [0])), ctx({ rayCommand, advertiseAddress: '10.0.0.6', httpPort: 0 }));
    expect(worker.servesHttp).toBe(false);
    expect(worker.processes.map((p) => [p.role, p.argv])).toEqual([
      ['ray-worker', ['/opt/ray/bin/ray', 'start', '--address', '10.0.0.5:6379', '--node-ip-address', '10.0.0.6', '--block']],
    ]);
  });
});

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

describe('waiting for the Ray cluster', () => {
  it('asks the head for its status', () => {
    expect(rayStatusArgs('10.0.0.5:6379')).toEqual(['status', '--address', '10.0.0.5:6379']);
  });

  it('counts active and idle nodes, not pending ones', () => {
    const stdout = [
      '======== Autoscaler status: 2025-03-04 10:21:07.118220 ========',
      'Node status',
      '---------------------------------------------------------------',
      'Active:',
      ' 1 node_5f3c1e2a9b7d4c6e8f0a1b2c3d4e5f60718293a4b5c6d7e8f9012345',
      'Idle:',
      ' 1 node_81d0e2f3a4b5c6d7e8f90123456789abcdef0123456789abcdef0123',
      'Pending:',
      ' 10.0.0.7: ray.worker.gpu, launching',
      'Recent failures:',
      ' (no failures)',
      '',
      'Resources',
      '---------------------------------------------------------------',
      'Usage:',
      ' 0.0/64.0 CPU',
      ' 0.0/16.0 GPU',
      ' 0B/1.2TiB memory',
      ' 0B/186.26GiB object_store_memory',
      '',
      'Demands:',
      ' (no resource demands)',
    ].join('\n');
    expect(parseRayStatusNodeCount(stdout)).toBe(2);
  });

  it('sums counts per node type and reads the older "Healthy:" heading', () => {
    const stdout = [
      '======== Autoscaler status: 2021-10-12 13:10:21.035674 ========',
      'Node status',
      '---------------------------------------------------------------',
      'Healthy:',
      ' 1 ray.head.default',
      ' 2 ray.worker.cpu',
      'Pending:',
      ' (no pending nodes)',
      'Recent failures:',
      ' (no failures)',
    ].join('\n');
    expect(parseRayStatusNodeCount(stdout)).toBe(3);
  });

  it('counts nothing before the cluster is up', () => {
    expect(parseRayStatusNodeCount('')).toBe(0);
    expect(parseRayStatusNodeCount('ConnectionError: Could not find any running Ray instance.\n')).toBe(0);
    expect(parseRayStatusNodeCount('Active:\n (no active nodes)\nIdle:\n (no idle nodes)\n')).toBe(0);
  });
});
