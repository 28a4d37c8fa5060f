// A real two-node Ray replica across two namespaced hosts: rank 0's agent starts the Ray head
// on its host's 198.18 address, rank 1's raylet joins it across the bridge from the other
// namespace, and the replica serves through the router outside. A third namespace on the same
// bridge, with no agent, cannot reach the head's port, nor any other port Ray listens on, on
// either host (raylets, object managers, agents, a worker holding an actor): each agent pins them
// in a block of its own and opens them to the placement's peers only (nftables), keeps the rules
// across its restart and removes them at undeploy. Needs root (skips without) and Ray, which the
// test setup installs (test/setup/tools.ts; or LLMGW_RAY_COMMAND).
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deploymentStatusQuery } from '../../workflows/definitions.js';
import type { DeploymentView } from '../../common/replica-types.js';
import { enginesOf, eventually, INVENTORIES, runLlmgw } from '../helpers/processes.js';
import { uniqueId } from '../helpers/temporal.js';
import { servedWithoutFailure } from '../helpers/load.js';
import { canConnect, listeners, networkUnavailable, reachablePorts, type NetHost } from '../helpers/netns/network.js';
import { tableName } from '../../agent/host/rendezvous-firewall.js';
import { startNetFleet, type NetFleet } from '../helpers/netns/fleet.js';
import { skipReason } from '../helpers/skips.js';
import { rayCommand } from '../setup/tools.js';

const ray = rayCommand();
const unavailable = skipReason(networkUnavailable());

const name = uniqueId('netray');
let fleet: NetFleet;

function cmdline(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8');
  } catch {
    return '';
  }
}

/** A Ray process: its binaries live under the ray package, and workers retitle themselves `ray::…`. */
const isRay = (pid: number): boolean => cmdline(pid).startsWith('ray::') || cmdline(pid).includes('/ray/');
const isRayWorker = (pid: number): boolean => cmdline(pid).startsWith('ray::');

/** The ports Ray listens on at a host's own address (or every address), worker ports among them. */
function rayPorts(host: NetHost): { ports: number[]; workers: number } {
  const own = listeners(fleet.network, host).filter((l) => ['*', '0.0.0.0', '::', host.address].includes(l.address));
  const ray = own.filter((l) => l.pids.some(isRay));
  const workers = ray.filter((l) => l.pids.some(isRayWorker));
  return { ports: [...new Set(ray.map((l) => l.port))], workers: workers.length };
}

/** A detached actor on the cluster: a Ray worker process that listens on a worker port until undeploy. */
function startActor(host: NetHost, headAddress: string): void {
  // Ray's own interpreter: the `ray` script's #! line (pip writes one), else the python beside it.
  const shebang = /^#!(\S*python\S*)/.exec(readFileSync(ray, 'utf8').slice(0, 300))?.[1];
  const python = shebang ?? join(dirname(ray), 'python');
  const driver = [
    'import ray',
    `ray.init(address=${JSON.stringify(headAddress)})`,
    '@ray.remote(num_cpus=0)',
    'class Pin:',
    '    def ping(self): return 1',
    "a = Pin.options(name='llmgw-pin', lifetime='detached').remote()",
    'ray.get(a.ping.remote(), timeout=60)',
  ].join('\n');
  fleet.network.exec(host, ['timeout', '90', 'env', 'RAY_USAGE_STATS_ENABLED=0', python, '-c', driver]);
}

describe.skipIf(unavailable !== undefined)('a Ray replica across two namespaced hosts', () => {
  beforeAll(async () => {
    fleet = await startNetFleet({
      label: 'netray',
      hosts: 2,
      bystanders: 1,
      inventory: join(INVENTORIES, 'netray.yaml'),
      // The venv's interpreter may live under /root (pyenv on CI), which the unprivileged engine
      // user cannot reach: Ray runs as the agent's user here.
      agentFlags: ['--ray-command', ray, '--engine-user', 'root'],
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
    const joined = new RegExp(`all 2 Ray nodes joined at ${leader.host.address.replace(/\./g, '\\.')}:(\\d+)`).exec(leader.proc.output());
    expect(joined, leader.proc.output()).not.toBeNull();
    const headPort = Number(joined![1]);

    const serve = async (): Promise<number> => {
      const samples = await servedWithoutFailure(
        { routerUrl: fleet.routerUrl, model: name, plainClients: 2, streamClients: 1, streamTokens: 10 },
        3_000,
      );
      expect(samples.length).toBeGreaterThan(5);
      expect(new Set(samples.map((s) => new URL(s.endpoint).hostname))).toEqual(new Set([leader.host.address]));
      return Number(new URL(samples[0]!.endpoint).port);
    };
    const httpPort = await serve();

    // The head's port: open to the other rank's host, closed to a stranger on the same bridge,
    // who still reaches the engine's HTTP port on the same address (the network works).
    const bystander = fleet.network.hosts[2]!;
    const guarded = (): void => {
      expect(listeners(fleet.network, leader.host).some((l) => l.port === headPort)).toBe(true);
      expect(canConnect(fleet.network, worker.host, leader.host.address, headPort)).toBe(true);
      expect(canConnect(fleet.network, bystander, leader.host.address, httpPort)).toBe(true);
      expect(canConnect(fleet.network, bystander, leader.host.address, headPort)).toBe(false);
    };
    guarded();

    // Every other port Ray listens on, on both hosts (a worker holding an actor too): the peer
    // reaches the leader's, the stranger none.
    startActor(leader.host, `${leader.host.address}:${headPort}`);
    const rayGuarded = (): void => {
      const [atLeader, atWorker] = [rayPorts(leader.host), rayPorts(worker.host)];
      expect(atLeader.ports.length, 'gcs, raylet, object manager').toBeGreaterThanOrEqual(3);
      expect(atWorker.ports.length, 'raylet, object manager').toBeGreaterThanOrEqual(2);
      expect(atLeader.workers + atWorker.workers, 'a Ray worker listening').toBeGreaterThan(0);
      expect(reachablePorts(fleet.network, bystander, leader.host.address, atLeader.ports)).toEqual([]);
      expect(reachablePorts(fleet.network, bystander, worker.host.address, atWorker.ports)).toEqual([]);
      expect(reachablePorts(fleet.network, worker.host, leader.host.address, atLeader.ports)).toEqual(
        [...atLeader.ports].sort((a, b) => a - b),
      );
    };
    rayGuarded();
    // A restarted agent adopts the replica and keeps its rules; the replica still serves.
    await fleet.restartAgent(leader);
    await eventually('the restarted agent to adopt the Ray head', () => /recovered: 1 adopted/.test(leader.proc.output()), 60_000);
    guarded();
    rayGuarded();
    await serve();

    // Undeployed: the leader's host carries no llmgw rules any more.
    const undeployed = await runLlmgw(['undeploy', name], {}, 120_000);
    expect(undeployed.code, undeployed.output).toBe(0);
    const table = tableName(leader.nodeId);
    await eventually(
      'the rendezvous rules removed',
      () => !fleet.network.exec(leader.host, ['nft', 'list', 'tables']).includes(table),
      30_000,
    );
  }, 500_000);
});
