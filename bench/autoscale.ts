// npm run bench:autoscale — one autoscaled deployment (the fake engine: 2 s cold start, 100 tokens
// a second, 8 requests at once) on a simulated 8×H100 host, behind the router, under a load ramped
// from 2 to 64 concurrent clients and back. Prints the replica count as it follows the load, the
// requests that failed (goal 0), the time requests waited at the router (p50/p99), how long the
// scale-up took, and every scaling decision (goal: no flapping, at most one up per up window and
// one down per down window). Short windows, given in the deployment's settings and printed.
// Figures, not asserts.
import { request } from 'undici';
import { deploymentStatusQuery } from '../workflows/definitions.js';
import { startStack } from './stack.js';

const SETTINGS = { min: 1, max: 4, target: 8, upAfterSeconds: 5, downAfterSeconds: 15 };
/** Concurrent clients, each level held for STAGE_S seconds; then 2 clients until the count is back at min. */
const RAMP = [2, 8, 16, 32, 64, 64, 32, 16, 8, 2];
const STAGE_S = 15;
const MAX_TOKENS = 32;
/** Flow control: an engine with this many waiting takes no more; beyond, requests wait at the router. */
const SATURATED_WAITING = 4;

const pct = (xs: number[], p: number): number => {
  if (xs.length === 0) return 0;
  const sorted = [...xs].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] as number;
};

async function main(): Promise<void> {
  const stack = await startStack({ hosts: 1, router: true, routerArgs: ['--saturated-waiting', String(SATURATED_WAITING)] });
  const name = `autobench-${Date.now().toString(36)}`;
  const handle = stack.client.workflow.getHandle(`deployment/${name}`);
  try {
    console.log(
      `autoscale benchmark: fake engine (2 s load, 100 tokens/s, --max-concurrency 8) on one simulated 8×H100 host, ` +
        `one router (flow control at ${SATURATED_WAITING} waiting per engine), ${MAX_TOKENS} tokens per request`,
    );
    console.log(`  settings: ${JSON.stringify(SETTINGS)}; clients ${RAMP.join(' → ')} (${STAGE_S} s each), then 2 until back at min`);
    await stack.client.workflow.start('deployModel', {
      workflowId: handle.workflowId,
      taskQueue: 'llmgw',
      args: [{ model: 'autobench', name, autoscale: SETTINGS }],
    });
    for (const started = Date.now(); (await handle.query(deploymentStatusQuery).catch(() => undefined))?.phase !== 'Ready';) {
      if (Date.now() - started > 120_000) throw new Error(`${name} not Ready in 120 s`);
      await new Promise((r) => setTimeout(r, 200));
    }
    await new Promise((r) => setTimeout(r, 2_000));

    let clients = 0;
    let ok = 0;
    let failed = 0;
    const waits: number[] = [];
    const failures = new Map<string, number>();
    const client = async (index: number): Promise<void> => {
      while (index < clients) {
        try {
          const res = await request(`${stack.routerUrl}/v1/chat/completions`, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({ model: 'autobench', max_tokens: MAX_TOKENS, messages: [{ role: 'user', content: `client ${index}` }] }),
          });
          await res.body.text();
          waits.push(Number(res.headers['x-llmgw-queued-ms'] ?? 0));
          if (res.statusCode === 200) ok++;
          else {
            failed++;
            failures.set(String(res.statusCode), (failures.get(String(res.statusCode)) ?? 0) + 1);
          }
        } catch (err) {
          failed++;
          failures.set((err as Error).message, (failures.get((err as Error).message) ?? 0) + 1);
        }
      }
    };
    const running: Array<Promise<void>> = [];
    const setClients = (n: number): void => {
      const from = clients;
      clients = n;
      for (let i = from; i < n; i++) running.push(client(i));
    };

    // The count as the deployment saw it, sampled; every change of desired is a decision.
    const t0 = Date.now();
    const stages: Array<{ at: number; clients: number }> = [];
    const timeline: Array<{ at: number; desired: number; ready: number; reason: string }> = [];
    let sampling = true;
    const sampler = (async () => {
      let last = '';
      while (sampling) {
        const v = await handle.query(deploymentStatusQuery).catch(() => undefined);
        if (v) {
          const key = `${v.desired}/${v.ready}`;
          if (key !== last)
            timeline.push({
              at: (Date.now() - t0) / 1000,
              desired: v.desired,
              ready: v.ready,
              reason: v.autoscale?.lastDecision?.reason ?? '',
            });
          last = key;
        }
        await new Promise((r) => setTimeout(r, 250));
      }
    })();

    for (const [i, n] of RAMP.entries()) {
      stages.push({ at: (Date.now() - t0) / 1000, clients: n });
      setClients(n);
      const v = await handle.query(deploymentStatusQuery);
      console.log(
        `  t=${((Date.now() - t0) / 1000).toFixed(0).padStart(3)} s: ${String(n).padStart(2)} clients (stage ${i + 1}), desired ${v.desired}, ready ${v.ready}`,
      );
      await new Promise((r) => setTimeout(r, STAGE_S * 1000));
    }
    setClients(2);
    for (const started = Date.now(); ;) {
      const v = await handle.query(deploymentStatusQuery);
      if (v.desired === SETTINGS.min && v.ready === SETTINGS.min) break;
      if (Date.now() - started > 120_000) break;
      await new Promise((r) => setTimeout(r, 500));
    }
    setClients(0);
    await Promise.all(running);
    sampling = false;
    await sampler;

    console.log('  replicas (desired/ready) over time:');
    for (const p of timeline)
      console.log(`    t=${p.at.toFixed(1).padStart(6)} s  ${p.desired}/${p.ready}${p.reason ? `  ${p.reason}` : ''}`);
    const changes: Array<{ at: number; from: number; to: number }> = [];
    for (let i = 1; i < timeline.length; i++) {
      const [prev, cur] = [timeline[i - 1], timeline[i]] as [(typeof timeline)[number], (typeof timeline)[number]];
      if (cur.desired !== prev.desired) changes.push({ at: cur.at, from: prev.desired, to: cur.desired });
    }
    const ups = changes.filter((c) => c.to > c.from);
    const downs = changes.filter((c) => c.to < c.from);
    const within = (xs: typeof changes, windowS: number) =>
      Math.max(0, ...xs.map((x) => xs.filter((y) => y.at >= x.at && y.at < x.at + windowS).length));
    // What the router itself counted, by direction (accepted Updates).
    const metrics = await (await request(`${stack.routerAdminUrl}/metrics`)).body.text();
    const sent = (direction: string) =>
      metrics
        .split('\n')
        .filter(
          (l) =>
            l.startsWith('llmgw_autoscaler_decisions_total{') && l.includes(`direction="${direction}"`) && l.includes('result="accepted"'),
        )
        .reduce((sum, l) => sum + Number(l.slice(l.lastIndexOf(' ') + 1)), 0);
    // Each step up: from the load change that asked for it to the decision and to the replicas Ready.
    const steps = ups.map((u) => {
      const stage = [...stages].reverse().find((st) => st.at <= u.at) ?? { at: 0, clients: 0 };
      const ready = timeline.find((p) => p.at >= u.at && p.ready >= u.to);
      return `${stage.clients} clients at t=${stage.at.toFixed(0)} s → ${u.to} decided +${(u.at - stage.at).toFixed(1)} s, Ready +${ready ? (ready.at - stage.at).toFixed(1) : '∞'} s`;
    });
    const queued = waits.filter((w) => w > 0);
    console.log(
      `  requests: ${ok} ok, ${failed} failed${failures.size ? ` (${[...failures].map(([k, n]) => `${k}: ${n}`).join(', ')})` : ''}; ` +
        `${queued.length} waited at the router`,
    );
    console.log(
      `  queue wait: p50 ${pct(waits, 50).toFixed(0)} ms, p99 ${pct(waits, 99).toFixed(0)} ms over all requests; ` +
        `p50 ${pct(queued, 50).toFixed(0)} ms, p99 ${pct(queued, 99).toFixed(0)} ms over those that waited`,
    );
    console.log(`  scale-up: ${steps.length ? steps.join('; ') : 'none'}`);
    console.log(
      `  decisions: ${changes.length} (${ups.length} up, ${downs.length} down; the router counted ${sent('up')} up, ${sent('down')} down accepted); at most ${within(ups, SETTINGS.upAfterSeconds)} up in any ` +
        `${SETTINGS.upAfterSeconds} s and ${within(downs, SETTINGS.downAfterSeconds)} down in any ${SETTINGS.downAfterSeconds} s; back at min ${timeline.at(-1)?.desired === SETTINGS.min ? 'yes' : 'no'}`,
    );
  } finally {
    await stack.llmgw(['undeploy', name]).catch(() => undefined);
    await stack.stop();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
