// Hosts on a real network: four hosts, each a network namespace on a bridge with its own
// 198.18.x address, an agent inside each, Temporal, the control worker and the router outside.
// Engines listen on their host's address and nowhere else, the router reaches them across the
// bridge, and partial cuts made with nftables (agent ↔ Temporal, router ↔ one host) cost the
// traffic nothing that a real operator would not expect to lose. What the control plane
// concluded about a host cut from Temporal is read where an operator reads it: `llmgw nodes`,
// and the Temporal Web UI rendered in a headless Chromium (the node's and the replica's current
// details). Needs root; skips without. Without Chromium only the Web UI check skips.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { join } from 'node:path';
import type { DeploymentView } from '../../common/replica-types.js';
import { eventually, INVENTORIES, runLlmgw, sleep } from '../helpers/processes.js';
import { uniqueId } from '../helpers/temporal.js';
import { servedWithoutFailure, startLoad, summarise } from '../helpers/load.js';
import { networkUnavailable, listeners } from '../helpers/netns/network.js';
import { skipReason } from '../helpers/skips.js';
import { cutFromControlPlane, cutFromRouter, healCuts } from '../helpers/netns/faults.js';
import { deploymentView, replicasReady, servedByRouter, startNetFleet, type NetFleet } from '../helpers/netns/fleet.js';
import { chromiumPath, renderedText, workflowPageUrl } from '../helpers/netns/web-ui.js';

const unavailable = skipReason(networkUnavailable());
const chromium = chromiumPath();
/** What the Web UI showed during the cut: the node's page and its replica's. */
let webUi: { node: string; replica: string } | undefined;

const name = uniqueId('net');
let fleet: NetFleet;

const status = (): Promise<DeploymentView> => deploymentView(fleet, name);
/** The hosts whose endpoints the router has out of rotation (its admin /health). */
const ejectedHosts = async (): Promise<Set<string>> => {
  const health = (await (await fetch(`${fleet.routerAdminUrl}/health`)).json()) as { ejected: string[] };
  return new Set(health.ejected.map((url) => new URL(url).hostname));
};
const ready = (): Promise<DeploymentView> => replicasReady(fleet, name, 4);

describe.skipIf(unavailable !== undefined)('hosts in network namespaces', () => {
  beforeAll(async () => {
    // A grace longer than the agent ↔ Temporal cut below, which must not turn into a Lost host.
    fleet = await startNetFleet({
      label: 'nethosts',
      hosts: 4,
      inventory: join(INVENTORIES, 'netx2.yaml'),
      lostGraceSeconds: 60,
      webUi: chromium !== undefined,
    });
  }, 180_000);

  afterAll(async () => {
    await fleet?.stop();
  }, 60_000);

  it('serves a deployment on four namespaced hosts: every engine listens on its host’s 198.18 address, none on loopback', async () => {
    const deployed = await runLlmgw(['deploy', 'net', '--name', name, '--replicas', '4', '--profile', 'one-gpu']);
    expect(deployed.code, deployed.output).toBe(0);
    const view = await ready();
    const hostsUsed = new Set(view.replicas.flatMap((r) => r.nodes));
    expect(hostsUsed.size).toBeGreaterThan(1);
    for (const agent of fleet.agents) {
      const open = listeners(fleet.network, agent.host);
      const engines = view.replicas.flatMap((r) => r.shards).filter((s) => s.nodeId === agent.nodeId);
      for (const shard of engines) {
        const own = open.filter((l) => l.pids.includes(shard.pid));
        expect(own.length, `engine ${shard.pid} on ${agent.host.name} listens`).toBeGreaterThan(0);
        for (const l of own) expect(l.address, `engine ${shard.pid} on ${agent.host.name}`).toBe(agent.host.address);
      }
      // Nothing of ours listens on the host's loopback (the agent's admin API is a Unix socket).
      expect(open.filter((l) => l.address.startsWith('127.') || l.address === '::1')).toEqual([]);
    }
    const nodes = await runLlmgw(['nodes']);
    for (const agent of fleet.agents) expect(nodes.output).toContain(agent.host.address);

    await servedByRouter(fleet, name);
    const samples = await servedWithoutFailure(
      { routerUrl: fleet.routerUrl, model: name, plainClients: 4, streamClients: 2, streamTokens: 20 },
      3_000,
    );
    const endpoints = new Set(samples.map((s) => new URL(s.endpoint).hostname));
    for (const endpoint of endpoints) expect(endpoint).toMatch(/^198\.1[89]\./);
    expect(endpoints.size).toBe(hostsUsed.size);
  });

  it('keeps serving with no failed request while one host’s agent is cut from Temporal, and shows what the control plane concluded', async () => {
    const view = await ready();
    const victim = fleet.agentOf(view.replicas[0]!.nodes[0]!);
    const load = startLoad({ routerUrl: fleet.routerUrl, model: name, plainClients: 4, streamClients: 2, streamTokens: 20 });
    await sleep(1_000);
    cutFromControlPlane(fleet.network, victim.host);
    try {
      // The liveness sweep hears no worker heartbeat: NotReady, and its replicas Unknown (still routed).
      const nodes = await eventually(
        'the cut-off node NotReady in llmgw nodes',
        async () => {
          const shown = await runLlmgw(['nodes']);
          const row = shown.output.split('\n').find((l) => l.includes(victim.nodeId));
          return row && /NotReady/.test(row) ? shown.output : undefined;
        },
        60_000,
        2_000,
      );
      expect(nodes).toMatch(/heartbeat|unreachable|presence/);
      const unknown = await eventually(
        'its replica Unknown',
        async () => (await status()).replicas.find((r) => r.nodes.includes(victim.nodeId) && r.phase === 'Unknown'),
        30_000,
      );
      if (chromium && fleet.webUiUrl) {
        // The node's page shows its phase and why (its current details), the replica's its phase.
        const page = async (workflowId: string, shows: RegExp): Promise<string> => {
          const { runId } = await fleet.client.client.workflow.getHandle(workflowId).describe();
          return renderedText(workflowPageUrl(fleet.webUiUrl!, workflowId, runId), (text) => shows.test(text), 60_000);
        };
        const literal = (text: string): string => text.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');
        webUi = {
          node: await page(`node/${victim.nodeId}`, new RegExp(`${literal(victim.nodeId)} — NotReady: the agent has sent no heartbeat`)),
          replica: await page(
            unknown.replicaId,
            new RegExp(`${literal(unknown.replicaId)} — Unknown since[\\s\\S]*agent on ${literal(victim.nodeId)} unreachable`),
          ),
        };
      }
      await sleep(2_000);
    } finally {
      healCuts(fleet.network, victim.host);
    }
    await eventually(
      'the node Ready again',
      async () => {
        const shown = await runLlmgw(['nodes']);
        const row = shown.output.split('\n').find((l) => l.includes(victim.nodeId));
        return row && /\bReady\b/.test(row) && !/NotReady/.test(row) ? true : undefined;
      },
      60_000,
      2_000,
    );
    const samples = await load.stop();
    expect(
      samples.filter((s) => !s.ok),
      summarise(samples),
    ).toEqual([]);
    expect(samples.filter((s) => new URL(s.endpoint).hostname === victim.host.address).length).toBeGreaterThan(0);
    await ready();
  });

  it('showed the cut-off node NotReady, and why, in the Temporal Web UI', (context) => {
    if (!chromium) context.skip('no chromium here: `sudo npm test` installs it (apt-get install chromium)');
    expect(webUi, 'the Web UI was read during the cut').toBeDefined();
    const line = (text: string, pattern: RegExp): string => text.split('\n').find((l) => pattern.test(l)) ?? '';
    console.log(
      `net-hosts: the Web UI showed, on the node's page: "${line(webUi!.node, /NotReady/)}"; on its replica's: "${line(webUi!.replica, /Unknown since/)}" / "${line(webUi!.replica, /unreachable/)}"`,
    );
    expect(webUi!.node).toMatch(/NotReady: the agent has sent no heartbeat for \d+ s \(its process or host is down, or it lost Temporal\)/);
    expect(webUi!.replica).toMatch(/Unknown since/);
  });

  it('routes around a host the router cannot reach while its agent still reaches Temporal', async () => {
    const view = await ready();
    const victim = fleet.agentOf(view.replicas[0]!.nodes[0]!);
    cutFromRouter(fleet.network, victim.host);
    try {
      // Requests already on a connection to that host when it was cut hang (a partition sends no
      // reset); the client gives up on them after 10 s. Those sent later must not go there.
      const cutAt = Date.now();
      const load = startLoad({ routerUrl: fleet.routerUrl, model: name, plainClients: 4, timeoutMs: 10_000 });
      // The router finds the host unreachable by itself (a scrape that times out, then fresh
      // connections that do not open) and ejects its endpoints: when, as its /health shows.
      let ejectedAt: number | undefined;
      for (let waited = 0; waited < 12_000; waited += 100) {
        if (ejectedAt === undefined && (await ejectedHosts()).has(victim.host.address)) ejectedAt = Date.now();
        await sleep(100);
      }
      const samples = await load.stop();
      const late = samples.filter((s) => s.start > cutAt + 5_000);
      console.log(
        `net-hosts: the router ejected the cut host ${ejectedAt === undefined ? 'never' : `${((ejectedAt - cutAt) / 1000).toFixed(1)} s after the cut`}; ` +
          `${late.length} requests sent more than 5 s after it, ${samples.length} in all, ${samples.filter((s) => !s.ok).length} failed`,
      );
      expect(ejectedAt, 'the unreachable host ejected').toBeDefined();
      expect(ejectedAt! - cutAt).toBeLessThan(8_000);
      // Once the router has ejected the unreachable endpoint, nothing is sent there and nothing fails.
      expect(
        late.filter((s) => !s.ok),
        summarise(late),
      ).toEqual([]);
      expect(late.filter((s) => new URL(s.endpoint).hostname === victim.host.address)).toEqual([]);
      expect(late.length).toBeGreaterThan(10);
      // The control plane still hears the agent: its replicas stay Ready.
      const after = await status();
      expect(
        after.replicas.filter((r) => r.phase === 'Ready').length,
        JSON.stringify(after.replicas.map((r) => [r.replicaId, r.phase, r.reason, r.nodes])),
      ).toBe(4);
    } finally {
      healCuts(fleet.network, victim.host);
    }
    // Once it answers again, the router's probes take it back.
    await eventually('the healed host back in rotation', async () => ((await ejectedHosts()).size === 0 ? true : undefined), 30_000);
  });
});
