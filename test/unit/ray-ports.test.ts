// Ray's ports pinned per shard (agent/engines/ray-ports.ts): every port `ray start` listens on is
// named on its command line, inside the shard's own block, the Ray Client's only on a head whose
// Ray has it; and reading the agent's probe for the client. The blocks' allocation and rules:
// test/unit/supervisor-ray-ports.test.ts; at work across namespaces: test/e2e/net-ray.test.ts.
import { describe, expect, it } from 'vitest';
import { buildEngineLaunch } from '../../agent/engines/index.js';
import { rayPortArgs } from '../../agent/engines/ray-ports.js';
import { rayClientProbeArgs, readRayClientProbe } from '../../agent/ray-client.js';
import { Engine, Launcher } from '../../proto/gen/llmgw/v1/shard_pb.js';
import { words } from '../helpers/command-line.js';
import { ctx, shard, twoNode, type ProfileInit } from '../helpers/engine-launch.js';

const rayProfile: ProfileInit = {
  engine: Engine.VLLM,
  launcher: Launcher.RAY,
  tensorParallel: 8,
  pipelineParallel: 2,
  gpusPerNode: 8,
  nodes: 2,
};
const GPUS = [0, 1, 2, 3, 4, 5, 6, 7];
const block = { from: 10256, to: 10511 };

const PINNED = words(
  '--node-manager-port 10256 --object-manager-port 10257 --runtime-env-agent-port 10258',
  '--dashboard-agent-listen-port 10259 --dashboard-agent-grpc-port 10260 --metrics-export-port 10261',
  '--min-worker-port 10264 --max-worker-port 10511',
);

describe("Ray's ports, pinned in the shard's block", () => {
  it('names every port the head and a worker listen on, all inside the block', () => {
    const head = buildEngineLaunch(shard(rayProfile, twoNode(0, GPUS)), ctx({ rayPorts: block })).processes[0]!;
    expect(head.role).toBe('ray-head');
    expect(head.argv).toEqual([...words('ray start --head --port 6379 --node-ip-address 10.0.0.5'), ...PINNED, '--block']);
    const worker = buildEngineLaunch(
      shard(rayProfile, twoNode(1, GPUS)),
      ctx({ advertiseAddress: '10.0.0.6', httpPort: 0, rayPorts: block, rayClient: true }),
    ).processes[0]!;
    // A worker node runs no Ray Client server, whatever its Ray has.
    expect(worker.argv).toEqual([...words('ray start --address 10.0.0.5:6379 --node-ip-address 10.0.0.6'), ...PINNED, '--block']);
    const ports = PINNED.filter((w) => /^\d+$/.test(w)).map(Number);
    expect(ports.every((p) => p >= block.from && p <= block.to)).toBe(true);
  });

  it("pins the Ray Client's port (else 10001, on every address) on a head whose Ray has it", () => {
    expect(rayPortArgs(block, { head: true, rayClient: true }).slice(-2)).toEqual(['--ray-client-server-port', '10262']);
    expect(rayPortArgs(block, { head: true, rayClient: false })).not.toContain('--ray-client-server-port');
    expect(rayPortArgs(block, { head: false, rayClient: true })).not.toContain('--ray-client-server-port');
  });

  it('keeps to the agent-wide worker range when no block was chosen', () => {
    const head = buildEngineLaunch(shard(rayProfile, twoNode(0, GPUS)), ctx({ rayWorkerPorts: { from: 20000, to: 20999 } })).processes[0]!;
    expect(head.argv.slice(-5)).toEqual(['--min-worker-port', '20000', '--max-worker-port', '20999', '--block']);
  });
});

describe('the Ray Client probe', () => {
  it('asks with a port Ray refuses before it starts anything, and reads either refusal', () => {
    expect(rayClientProbeArgs()).toEqual(words('start --head --ray-client-server-port 1 --block'));
    // Ray 2.60's two refusals, verbatim.
    const missing =
      'ValueError: Ray Client requires pip package `ray[client]`. If you installed the minimal Ray (e.g. `pip install ray`), please reinstall by executing `pip install ray[client]`.';
    const range = 'ValueError: ray_client_server_port must be an integer between 1024 and 65535.';
    expect(readRayClientProbe(`Traceback (most recent call last):\n${missing}\n`)).toBe('no-client');
    expect(readRayClientProbe(`Traceback (most recent call last):\n${range}\n`)).toBe('client');
    expect(readRayClientProbe('bash: ray: command not found')).toBe('unknown');
  });
});
