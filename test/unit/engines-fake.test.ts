// The fake engine's command lines as the agent spawns them: vLLM-style flags on one node, the
// leader flags on each native rank of two nodes, and standing in for vllm serve on a real Ray
// cluster.
import { describe, expect, it } from 'vitest';
import { buildEngineLaunch } from '../../agent/engines/index.js';
import { Engine, Launcher } from '../../proto/gen/llmgw/v1/shard_pb.js';
import { words } from '../helpers/command-line.js';
import { ctx, FAKE_CMD, MARKERS, oneServingEngine, shard, twoNode, type ProfileInit } from '../helpers/engine-launch.js';

// The fake engine as the agent starts it for the profile's model 'demo', then the flags a test names.
const fakeArgv = (...flags: string[]) => [...FAKE_CMD, ...words('--model demo --served-model-name demo', ...flags)];
const leaderFlags = (rank: number) => `--nnodes 2 --node-rank ${rank} --leader 10.0.0.5:6379`;

describe('fake engine command lines', () => {
  it('starts the fake engine with vLLM-style flags on one node', () => {
    const launch = buildEngineLaunch(
      shard({ engine: Engine.FAKE, modelSource: 'demo', servedName: 'demo', args: ['--load-time', '2'] }),
      ctx(),
    );
    const argv = fakeArgv('--host 10.0.0.5 --port 18000 --tensor-parallel-size 1 --pipeline-parallel-size 1 --load-time 2');
    expect(launch).toEqual(oneServingEngine(argv, { CUDA_DEVICE_ORDER: 'PCI_BUS_ID', CUDA_VISIBLE_DEVICES: '0', ...MARKERS }));
  });

  const fake2: ProfileInit = { engine: Engine.FAKE, modelSource: 'demo', servedName: 'demo', tensorParallel: 2, gpusPerNode: 1, nodes: 2 };

  it('gives native rank 0 the leader flags and a port', () => {
    const launch = buildEngineLaunch(shard(fake2, twoNode(0, [0])), ctx());
    expect(launch.servesHttp).toBe(true);
    const argv = fakeArgv('--host 10.0.0.5 --port 18000 --tensor-parallel-size 2 --pipeline-parallel-size 1', leaderFlags(0));
    expect(launch.processes.map((p) => p.argv)).toEqual([argv]);
  });

  it('gives native rank 1 the leader flags and no port', () => {
    const launch = buildEngineLaunch(shard(fake2, twoNode(1, [1])), ctx({ advertiseAddress: '10.0.0.6', httpPort: 0 }));
    expect(launch.servesHttp).toBe(false);
    const argv = fakeArgv('--host 10.0.0.6 --tensor-parallel-size 2 --pipeline-parallel-size 1', leaderFlags(1));
    expect(launch.processes.map((p) => p.argv)).toEqual([argv]);
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
        fakeArgv('--host 10.0.0.5 --port 18000 --tensor-parallel-size 2 --pipeline-parallel-size 1 --distributed-executor-backend ray'),
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
