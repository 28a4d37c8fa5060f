// The SGLang command lines the agent spawns: sglang.launch_server on one node, and on two nodes
// with the dist-init address, each rank's own flags, and --pp-size for pipeline parallelism.
import { describe, expect, it } from 'vitest';
import { buildEngineLaunch } from '../../agent/engines/index.js';
import { Engine } from '../../proto/gen/llmgw/v1/shard_pb.js';
import { words } from '../helpers/command-line.js';
import { ctx, MARKERS, shard, twoNode, type ProfileInit } from '../helpers/engine-launch.js';

describe('SGLang command lines', () => {
  it('starts sglang.launch_server on one node', () => {
    const launch = buildEngineLaunch(shard({ engine: Engine.SGLANG, tensorParallel: 2, gpusPerNode: 2 }, { gpuIndices: [0, 1] }), ctx());
    expect(launch.servesHttp).toBe(true);
    expect(launch.healthPath).toBe('/health');
    expect(launch.processes).toEqual([
      {
        role: 'engine',
        blocking: true,
        argv: words(
          'python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct --served-model-name llama',
          '--host 10.0.0.5 --port 18000 --tp 2',
        ),
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
      words(
        '/opt/sglang/bin/python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct --served-model-name llama',
        '--host 10.0.0.5 --port 18000 --tp 16 --nnodes 2 --node-rank 0 --dist-init-addr 10.0.0.5:6379 --trust-remote-code',
      ),
    ]);
  });

  it('gives rank 1 the same flags with its own rank and port, and does not health-check it', () => {
    const launch = buildEngineLaunch(
      shard(sglang2, twoNode(1, [0, 1, 2, 3, 4, 5, 6, 7])),
      ctx({ advertiseAddress: '10.0.0.6', httpPort: 18004 }),
    );
    expect(launch.servesHttp).toBe(false);
    expect(launch.processes.map((p) => p.argv)).toEqual([
      words(
        'python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct --served-model-name llama',
        '--host 10.0.0.6 --port 18004 --tp 16 --nnodes 2 --node-rank 1 --dist-init-addr 10.0.0.5:6379 --trust-remote-code',
      ),
    ]);
    expect(launch.processes[0]?.env.VLLM_HOST_IP).toBeUndefined();
  });

  it('passes --pp-size only for pipeline parallelism', () => {
    const launch = buildEngineLaunch(shard({ ...sglang2, pipelineParallel: 2 }, twoNode(0, [0, 1, 2, 3, 4, 5, 6, 7])), ctx());
    const argv = launch.processes[0]?.argv ?? [];
    expect(argv[argv.indexOf('--pp-size') + 1]).toBe('2');
  });
});
