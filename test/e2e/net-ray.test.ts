// A real two-node Ray replica across two namespaced hosts: rank 0's agent starts the Ray head
// on its host's 198.18 address, rank 1's raylet joins it across the bridge from the other
// namespace, and the replica serves through the router outside. Needs root and Ray
// (.llmgw/ray-venv or LLMGW_RAY_COMMAND, as test/e2e/ray.test.ts); skips without either.
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deploymentStatusQuery } from '../../workflows/definitions.js';
import type { DeploymentView } from '../../common/replica-types.js';
import { enginesOf, INVENTORIES, runLlmgw } from '../helpers/processes.js';
import { uniqueId } from '../helpers/temporal.js';
import { servedWithoutFailure } from '../helpers/load.js';
import { listeners, networkUnavailable } from '../helpers/netns/network.js';
import { startNetFleet, type NetFleet } from '../helpers/netns/fleet.js';

const ray = [process.env.LLMGW_RAY_COMMAND, resolve(__dirname, '../../.llmgw/ray-venv/bin/ray')].find((c) => c && existsSync(c));
const unavailable = networkUnavailable() ?? (ray ? undefined : 'no ray program (.llmgw/ray-venv/bin/ray or LLMGW_RAY_COMMAND)');
if (unavailable) console.warn(`net-ray: skipped: ${unavailable}`);

const name = uniqueId('netray');
let fleet: NetFleet;

describe.skipIf(unavailable !== undefined)('a Ray replica across two namespaced hosts', () => {
  beforeAll(async () => {
    fleet = await startNetFleet({
      label: 'netray',
      hosts: 2,
      inventory: join(INVENTORIES, 'netray.yaml'),
      // The venv's interpreter may live under /root (pyenv on CI), which the unprivileged engine
      // user cannot reach: Ray runs as the agent's user here.
      agentFlags: ['--ray-command', ray!, '--engine-user', 'root'],
    });
  }, 180_000);

  afterAll(async () => {
    await runLlmgw(['undeploy', name]).catch(() => undefined);
    await fleet?.stop();
  }, 120_000);

  it('forms its Ray cluster across the bridge and serves through the router', async () => {
    const deployed = await runLlmgw(
      ['deploy', 'net', '--name', name, '--profile', 'ray-2x1', '--replicas', '1', '--wait', '--timeout', '240'],
      {},
      300_000,
    );
    expect(deployed.code, deployed.output).toBe(0);
    const view: DeploymentView = await fleet.client.client.workflow.getHandle(`deployment/${name}`).query(deploymentStatusQuery);
    const replica = view.replicas.find((r) => r.phase === 'Ready')!;
    const [rank0, rank1] = [...replica.shards].sort((a, b) => a.rank - b.rank);
    const leader = fleet.agentOf(rank0!.nodeId);
    const worker = fleet.agentOf(rank1!.nodeId);
    expect(leader.host.address).not.toBe(worker.host.address);
    expect(rank0!.managementAddress).toBe(leader.host.address);
    // Ray runs on both hosts, and the worker host's raylet listens on its own address.
    expect(enginesOf([leader.nodeId]).length).toBeGreaterThan(0);
    expect(enginesOf([worker.nodeId]).length).toBeGreaterThan(0);
    expect(listeners(fleet.network, worker.host).some((l) => l.address === worker.host.address)).toBe(true);
    expect(leader.proc.output()).toMatch(new RegExp(`all 2 Ray nodes joined at ${leader.host.address.replace(/\./g, '\\.')}:`));

    const samples = await servedWithoutFailure(
      { routerUrl: fleet.routerUrl, model: name, plainClients: 2, streamClients: 1, streamTokens: 10 },
      3_000,
    );
    expect(samples.length).toBeGreaterThan(5);
    expect(new Set(samples.map((s) => new URL(s.endpoint).hostname))).toEqual(new Set([leader.host.address]));
  }, 400_000);
});
