// Fencing across a real partition, with the default timings (no --lost-grace-seconds): a host of
// four drops off the network (its link down) under load while its agent and engine keep
// running. Its replica is Ready elsewhere within 45 s, the only failed requests are those that
// were on their way to that host when it was cut, and when the link comes back its stale engine
// is stopped within 30 s, never routed to, and no GPU is held twice. Then every host is cut
// from Temporal at once (the control plane's own switch, not four hosts): for longer than
// silence + grace, and yet none is declared Lost, nothing moves, nothing is fenced, and no
// request fails. The rule this checks is written in docs/failures.md ("A host cut off from
// the network").
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { join } from 'node:path';
import { describeNodeQuery } from '../../workflows/definitions.js';
import type { DeploymentView } from '../../common/replica-types.js';
import { DEFAULT_LOST_GRACE_SECONDS } from '../../common/node-types.js';
import { enginesOf, eventually, INVENTORIES, runLlmgw, sleep } from '../helpers/processes.js';
import { uniqueId } from '../helpers/temporal.js';
import { startLoad, summarise } from '../helpers/load.js';
import { networkUnavailable } from '../helpers/netns/network.js';
import { skipReason } from '../helpers/skips.js';
import { cutFromControlPlane, cutHost, healCuts, restoreHost } from '../helpers/netns/faults.js';
import { deploymentView, replicasReady, servedByRouter, startNetFleet, type NetFleet } from '../helpers/netns/fleet.js';
import { gpusHeldTwice } from '../helpers/netns/gpu-holders.js';

const unavailable = skipReason(networkUnavailable());

const name = uniqueId('fence');
let fleet: NetFleet;
/** The client gives up on a request after this long (a partition answers nothing). */
const CLIENT_TIMEOUT_MS = 10_000;

const status = (): Promise<DeploymentView> => deploymentView(fleet, name);

describe.skipIf(unavailable !== undefined)('a host cut off from the network', () => {
  beforeAll(async () => {
    fleet = await startNetFleet({ label: 'netfence', hosts: 4, inventory: join(INVENTORIES, 'netx2.yaml') });
    const deployed = await runLlmgw(['deploy', 'net', '--name', name, '--replicas', '3', '--profile', 'one-gpu']);
    expect(deployed.code, deployed.output).toBe(0);
  }, 240_000);

  afterAll(async () => {
    await fleet?.stop();
  }, 60_000);

  it('re-places its replica within 45 s, fails only what was on its way there, and fences its stale engine within 30 s of its return', async () => {
    const before = await replicasReady(fleet, name, 3);
    const moved = before.replicas[0]!;
    const victim = fleet.agentOf(moved.nodes[0]!);
    const staleShard = moved.shards[0]!;
    await servedByRouter(fleet, name);
    const load = startLoad({
      routerUrl: fleet.routerUrl,
      model: name,
      plainClients: 4,
      streamClients: 2,
      streamTokens: 40,
      timeoutMs: CLIENT_TIMEOUT_MS,
    });
    await sleep(2_000);

    const cutAt = Date.now();
    cutHost(victim.host);
    let twice = gpusHeldTwice(fleet.nodeIds);
    const phases: string[] = [];
    const readyElsewhere = await eventually(
      'its replica Ready on another host',
      async () => {
        const r = (await status()).replicas.find((x) => x.replicaId === moved.replicaId);
        if (r && phases.at(-1)?.split(' ')[0] !== r.phase) phases.push(`${r.phase} +${Date.now() - cutAt} ms`);
        return r?.phase === 'Ready' && !r.nodes.includes(victim.nodeId) ? r : undefined;
      },
      90_000,
      500,
    );
    const movedAfterMs = Date.now() - cutAt;
    // The cut-off host's engine was never told: it still runs, unreachable.
    expect(enginesOf([victim.nodeId]).some((e) => e.env.LLMGW_SHARD_ID === staleShard.shardId)).toBe(true);
    await sleep(3_000);

    const restoredAt = Date.now();
    restoreHost(victim.host);
    await eventually(
      'the stale engine stopped',
      () => {
        twice = twice.length ? twice : gpusHeldTwice(fleet.nodeIds);
        return enginesOf([victim.nodeId]).some((e) => e.env.LLMGW_SHARD_ID === staleShard.shardId) ? undefined : true;
      },
      60_000,
      250,
    );
    const fencedAfterMs = Date.now() - restoredAt;
    await sleep(3_000);
    const samples = await load.stop();
    // Hosts nobody cut: with 10 s of silence before NotReady, a healthy agent must not look silent.
    const calledSilent = await Promise.all(fleet.agents.filter((a) => a !== victim).map((a) => fleet.silentSignals(a.nodeId)));
    console.log(
      `net-fencing: ${phases.join(', ')}; Ready elsewhere ${movedAfterMs} ms after the cut, stale engine stopped ${fencedAfterMs} ms after the return; hosts not cut called silent: ${calledSilent.join(', ')}; ${summarise(samples)}`,
    );

    expect(movedAfterMs).toBeLessThan(45_000);
    expect(readyElsewhere.endpoint).not.toContain(victim.host.address);
    expect(fencedAfterMs).toBeLessThan(30_000);
    expect(twice).toEqual([]);
    expect(gpusHeldTwice(fleet.nodeIds)).toEqual([]);
    // Failed: only requests sent before the router gave up on the host (its 3 s connect timeout
    // ejects it; a request already on a connection there hangs until the client's timeout).
    const failed = samples.filter((s) => !s.ok);
    expect(
      failed.filter((s) => s.start > cutAt + 3_500),
      summarise(samples),
    ).toEqual([]);
    const failedAt = failed.map((s) => s.start - cutAt);
    expect(
      failed.length,
      `${summarise(samples)}; sent from ${Math.min(...failedAt)} to ${Math.max(...failedAt)} ms after the cut`,
    ).toBeLessThanOrEqual(6);
    // Once back, the stale engine is never routed to.
    const victimServed = samples.filter(
      (s) => s.ok && s.start > restoredAt && s.endpoint.includes(`${victim.host.address}:${staleShard.httpPort}`),
    );
    expect(victimServed).toEqual([]);
    expect(samples.filter((s) => s.ok && s.start > cutAt + 3_500).length).toBeGreaterThan(20);
  });

  it('declares no host Lost while every host is cut from Temporal at once, and serves throughout', async () => {
    const ready = (): Promise<DeploymentView> => replicasReady(fleet, name, 3);
    const before = await ready();
    const load = startLoad({ routerUrl: fleet.routerUrl, model: name, plainClients: 4, streamClients: 2, streamTokens: 20 });
    await sleep(1_000);
    const cutAt = Date.now();
    for (const agent of fleet.agents) cutFromControlPlane(fleet.network, agent.host);
    try {
      // Silence (10 s) and the grace (20 s) both run out, with room to spare.
      await sleep(10_000 + DEFAULT_LOST_GRACE_SECONDS * 1000 + 15_000);
      const views = await Promise.all(
        fleet.nodeIds.map((id) => fleet.client.client.workflow.getHandle(`node/${id}`).query(describeNodeQuery)),
      );
      const nodes = (await runLlmgw(['nodes'])).output;
      console.log(`net-fencing: every host cut from Temporal for ${Date.now() - cutAt} ms:\n${nodes}`);
      expect(nodes).toMatch(/silent at once/);
      expect(views.map((v) => v.phase)).toEqual(fleet.nodeIds.map(() => 'NotReady'));
      for (const view of views) expect(view.reason).toMatch(/4 of 4 nodes are silent at once/);
      // The replicas stay where they are, Unknown and still routed.
      const during = await status();
      expect(during.replicas.map((r) => [r.replicaId, r.phase])).toEqual(before.replicas.map((r) => [r.replicaId, 'Unknown']));
    } finally {
      for (const agent of fleet.agents) healCuts(fleet.network, agent.host);
    }
    const after = await ready();
    // Nothing moved and nothing was fenced: the same engines serve.
    expect(after.replicas.flatMap((r) => r.shards.map((s) => `${s.shardId}@${s.pid}`)).sort()).toEqual(
      before.replicas.flatMap((r) => r.shards.map((s) => `${s.shardId}@${s.pid}`)).sort(),
    );
    const samples = await load.stop();
    expect(
      samples.filter((s) => !s.ok),
      summarise(samples),
    ).toEqual([]);
    expect(samples.length).toBeGreaterThan(50);
  });
});
