// The vLLM command lines and environments the agent spawns: single-GPU and TP4 vllm serve with
// their GPUs, HCAs and interfaces, a Ray head and workers for two nodes on the agent's Ray ports,
// and multi-node without Ray refused.
import { describe, expect, it } from 'vitest';
import { interfaceOf } from '../../agent/discovery/discover-host.js';
import { parseAgentFlags } from '../../agent/config.js';
import { buildEngineLaunch } from '../../agent/engines/index.js';
import { Engine, Launcher } from '../../proto/gen/llmgw/v1/shard_pb.js';
import { words } from '../helpers/command-line.js';
import { ctx, expectInvalidSpec, MARKERS, oneServingEngine, shard, twoNode, type ProfileInit } from '../helpers/engine-launch.js';

describe('vLLM command lines', () => {
  it('starts a single-GPU vllm serve with exactly its GPU and the markers', () => {
    const launch = buildEngineLaunch(shard({ engine: Engine.VLLM, args: ['--max-model-len', '8192'] }, { gpuIndices: [3] }), ctx());
    const argv = words(
      'vllm serve meta-llama/Llama-3.1-8B-Instruct --served-model-name llama --host 10.0.0.5 --port 18000',
      '--tensor-parallel-size 1 --pipeline-parallel-size 1 --max-model-len 8192',
    );
    const env = { CUDA_DEVICE_ORDER: 'PCI_BUS_ID', CUDA_VISIBLE_DEVICES: '3', VLLM_HOST_IP: '10.0.0.5', ...MARKERS };
    expect(launch).toEqual(oneServingEngine(argv, env));
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
    expect(engine?.argv).toEqual(
      words(
        '/opt/venv/bin/vllm serve meta-llama/Llama-3.1-8B-Instruct --served-model-name llama --host 10.0.0.5 --port 18000',
        '--tensor-parallel-size 4 --pipeline-parallel-size 1',
      ),
    );
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
      argv: words(
        'vllm serve meta-llama/Llama-3.1-8B-Instruct --served-model-name llama --host 10.0.0.5 --port 18000',
        '--tensor-parallel-size 8 --pipeline-parallel-size 2 --distributed-executor-backend ray',
      ),
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
