// Autoscaling and scale to zero, end to end: a real control worker, a simulated AUTO host running
// the fake engine (5 s cold start), and real routers. A deployment with min 0 left idle goes to
// zero engines with its GPUs free and stays listed; the first request afterwards is held through
// the cold start and answered, with 20 more sent meanwhile; beyond a router's limits a clean 429 or
// 503 with Retry-After; a router restart at zero and a control-worker restart mid-scale-up lose no
// held request; steady load adds (almost) nothing to deployModel's history; bad settings are
// refused naming the path in the catalog validator, the CLI and the workflow input alike; an API
// key scoped to another model is refused it and wakes nothing.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WorkflowFailedError, type Client } from '@temporalio/client';
import { findFreePort } from '../../common/ports.js';
import type { DeploymentView } from '../../common/replica-types.js';
import { deploymentStatusQuery, describeNodeQuery } from '../../workflows/definitions.js';
import {
  enginesOf,
  eventually,
  inventory,
  type LlmgwProcess,
  runLlmgw,
  sleep,
  spawnControlWorker,
  spawnLlmgw,
  undeployAndWait,
  uniqueId,
  useIsolatedFleet,
} from '../helpers/fleet.js';

/** How long the steady load runs (LLMGW_AUTOSCALE_STEADY_SECONDS=600 for the ten-minute figure). */
const STEADY_SECONDS = Number(process.env.LLMGW_AUTOSCALE_STEADY_SECONDS ?? 60);
const IDLE_SECONDS = 8;
const SETTINGS = { min: 0, max: 2, target: 8, idleToZeroSeconds: IDLE_SECONDS, upAfterSeconds: 10, downAfterSeconds: 10 };

// Its own server: it restarts the control worker and a router, which on the shared server would
// be one of several workers (no restart at all) and a dead router for every other file.
const fleet = useIsolatedFleet({ ownTemporal: 'autoscale' });
let client: Client;
let worker: LlmgwProcess;
const nodeId = uniqueId('auto');
const name = uniqueId('auto');
const servedName = 'auto';

interface RouterProc {
  proc: LlmgwProcess;
  base: string;
  /** The admin listener: the detailed /health with the waiting lines. */
  admin: string;
}

/** A router on `port` (a restart takes the same one, and with it the router's place in the routes workflow). */
async function startRouterProc(port: number, extra: string[] = []): Promise<RouterProc> {
  const admin = `127.0.0.1:${await findFreePort()}`;
  const proc = spawnLlmgw([
    'router',
    '--host',
    '127.0.0.1',
    '--port',
    String(port),
    '--admin-addr',
    admin,
    '--shutdown-grace',
    '60',
    ...extra,
  ]);
  await proc.waitForOutput(/listening on http/, 60_000);
  return { proc, base: `http://127.0.0.1:${port}`, admin: `http://${admin}` };
}

interface Answer {
  status: number;
  ms: number;
  retryAfter: number;
  code: string | undefined;
  message: string | undefined;
}

async function ask(base: string, maxTokens = 8, key?: string): Promise<Answer> {
  const started = performance.now();
  const res = await fetch(`${base}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(key === undefined ? {} : { authorization: `Bearer ${key}` }) },
    body: JSON.stringify({ model: servedName, max_tokens: maxTokens, messages: [{ role: 'user', content: 'hello' }] }),
  });
  const body = (await res.json()) as { error?: { code?: string; message?: string } };
  return {
    status: res.status,
    ms: performance.now() - started,
    retryAfter: Number(res.headers.get('retry-after') ?? 0),
    code: body.error?.code,
    message: body.error?.message,
  };
}

const view = (): Promise<DeploymentView> => client.workflow.getHandle(`deployment/${name}`).query(deploymentStatusQuery);

async function queued(router: RouterProc): Promise<number> {
  const health = (await (await fetch(`${router.admin}/health`)).json()) as { queued: Record<string, number> };
  return health.queued[servedName] ?? 0;
}

/** Idle: phase Idle, no engine left on the host, every GPU free. */
async function atZero(timeoutMs = 90_000): Promise<void> {
  await eventually(
    `${name} at zero with its GPUs free`,
    async () => {
      const v = await view();
      const node = await client.workflow.getHandle(`node/${nodeId}`).query(describeNodeQuery);
      return v.phase === 'Idle' && enginesOf([nodeId]).length === 0 && node.freeGpus.length === 8 ? true : undefined;
    },
    timeoutMs,
    500,
  );
}

let router: RouterProc;
let routerPort: number;

beforeAll(async () => {
  client = fleet.client;
  worker = fleet.workers[0]!;
  await fleet.agent(nodeId, { inventory: inventory('autox8.yaml') });
  routerPort = await findFreePort();
  router = await startRouterProc(routerPort);
});

afterAll(() => undeployAndWait(client, name, [nodeId]));

describe('autoscaling and scale to zero', () => {
  it('refuses bad settings naming the path, in the catalog validator, the CLI and the workflow input alike', async () => {
    const cases: Array<{ settings: Record<string, unknown>; flags?: string[]; path: RegExp }> = [
      {
        settings: { min: 3, max: 1 },
        flags: ['--min-replicas', '3', '--max-replicas', '1'],
        path: /autoscale\.min: min must not be above max/,
      },
      { settings: { min: -1, max: 1 }, flags: ['--min-replicas=-1', '--max-replicas', '1'], path: /autoscale\.min: min must be ≥ 0/ },
      {
        settings: { min: 0, max: 1, target: 0 },
        flags: ['--min-replicas', '0', '--max-replicas', '1', '--autoscale-target', '0'],
        path: /autoscale\.target: target must be > 0/,
      },
      { settings: { min: 0, max: 1, idleToZero: 5 }, path: /autoscale(\.idleToZero)?: Unrecognized key/ },
    ];
    const dir = mkdtempSync(join(tmpdir(), 'llmgw-autoscale-'));
    for (const [i, c] of cases.entries()) {
      const file = join(dir, `catalog-${i}.yaml`);
      writeFileSync(
        file,
        `models:\n  - name: auto\n    source: engine://llmgw/fake-auto\n    autoscale: ${JSON.stringify(c.settings)}\n    profiles:\n      - { name: p, engine: fake, gpuClass: AUTO, gpusPerNode: 1 }\n`,
      );
      const validate = await runLlmgw(['catalog', 'validate', file]);
      expect(validate.code, validate.output).not.toBe(0);
      expect(validate.output).toMatch(new RegExp(`models\\[0\\]\\.${c.path.source}`));

      if (c.flags) {
        const deploy = await runLlmgw(['deploy', 'auto', '--name', uniqueId('bad'), ...c.flags]);
        expect(deploy.code, deploy.output).not.toBe(0);
        expect(deploy.output).toMatch(c.path);
      }

      const bad = client.workflow.execute('deployModel', {
        workflowId: `deployment/${uniqueId('bad')}`,
        taskQueue: 'llmgw',
        args: [{ model: 'auto', autoscale: c.settings }],
      });
      const failure = await bad.then(
        () => undefined,
        (err: unknown) => err,
      );
      expect(failure).toBeInstanceOf(WorkflowFailedError);
      expect((failure as WorkflowFailedError).cause?.message).toMatch(c.path);
    }
  });

  it('goes to zero after idleToZeroSeconds: no engine, every GPU free, the model still listed', async () => {
    await client.workflow.start('deployModel', {
      workflowId: `deployment/${name}`,
      taskQueue: 'llmgw',
      args: [{ model: 'auto', name, autoscale: SETTINGS }],
    });
    await eventually(`${name} Ready`, async () => ((await view()).phase === 'Ready' ? true : undefined), 60_000, 250);
    const readyAt = Date.now();
    await atZero();
    const v = await view();
    console.log(`Idle after ${((Date.now() - readyAt) / 1000).toFixed(1)} s: ${v.autoscale?.lastDecision?.reason ?? ''}`);
    expect(v.desired).toBe(0);
    const models = (await (await fetch(`${router.base}/v1/models`)).json()) as { data: Array<{ id: string }> };
    expect(models.data.map((m) => m.id)).toContain(servedName);
  });

  it('holds the first request through the cold start and answers it, and 20 sent meanwhile all succeed', async () => {
    const first = ask(router.base);
    await sleep(1000);
    const meanwhile = await Promise.all(Array.from({ length: 20 }, () => ask(router.base)));
    const answer = await first;
    console.log(
      `cold start: first request answered after ${(answer.ms / 1000).toFixed(1)} s; 20 more in ${(Math.max(...meanwhile.map((a) => a.ms)) / 1000).toFixed(1)} s at most`,
    );
    expect(answer.status).toBe(200);
    expect(answer.ms).toBeGreaterThan(4000);
    expect(meanwhile.map((a) => a.status)).toEqual(Array.from({ length: 20 }, () => 200));
  });

  it('loses no held request when the router restarts while the deployment is at zero', async () => {
    await atZero();
    const before = Array.from({ length: 5 }, () => ask(router.base));
    await eventually('requests held', async () => ((await queued(router)) === 5 ? true : undefined), 10_000, 50);
    // The old router stops listening at once and finishes what it holds (it woke the deployment);
    // the new one, on its address, takes over at once.
    process.kill(router.proc.pid, 'SIGTERM');
    const old = router;
    router = await eventually('the new router', () => startRouterProc(routerPort).catch(() => undefined), 30_000, 200);
    const after = await Promise.all(Array.from({ length: 5 }, () => ask(router.base)));
    expect([...(await Promise.all(before)), ...after].map((a) => a.status)).toEqual(Array.from({ length: 10 }, () => 200));
    await old.proc.exited;
  });

  it('loses no held request when the control worker restarts in the middle of a scale-up', async () => {
    await atZero();
    const held = Array.from({ length: 10 }, () => ask(router.base));
    await eventually(
      'a replica starting',
      async () => {
        const v = await view();
        return v.desired > 0 && v.replicas.some((r) => ['Pending', 'Placing', 'Starting', 'Loading'].includes(r.phase)) ? true : undefined;
      },
      30_000,
      100,
    );
    await worker.kill9();
    await sleep(1000);
    worker = await spawnControlWorker();
    const answers = await Promise.all(held);
    expect(answers.map((a) => a.status)).toEqual(Array.from({ length: 10 }, () => 200));
  });

  it(
    `adds at most a handful of history events to deployModel under ${STEADY_SECONDS} s of steady load`,
    { timeout: STEADY_SECONDS * 1000 + 180_000 },
    async () => {
      let running = true;
      let failed = 0;
      const clients = Array.from({ length: 4 }, async () => {
        while (running) if ((await ask(router.base, 16).catch(() => undefined))?.status !== 200) failed++;
      });
      // Settle first: the count this load asks for, every replica Ready.
      await eventually(
        'a settled count',
        async () => {
          const v = await view();
          return v.phase === 'Ready' && v.desired === 1 ? true : undefined;
        },
        120_000,
        500,
      );
      const handle = client.workflow.getHandle(`deployment/${name}`);
      const before = Number((await handle.describe()).historyLength);
      await sleep(STEADY_SECONDS * 1000);
      const after = Number((await handle.describe()).historyLength);
      running = false;
      await Promise.all(clients);
      const added = ((await handle.fetchHistory()).events ?? []).slice(before).map((e) => String(e.eventType));
      console.log(
        `steady load for ${STEADY_SECONDS} s: ${after - before} history event(s) added to deployModel (${before} → ${after}: ${added.join(', ')}); ${failed} failed request(s)`,
      );
      expect(failed).toBe(0);
      // Steady load changes nothing, so no decision is recorded; but on a loaded machine the
      // autoscaler can read slowness as load and scale up and back (62-69 events, seen in CI
      // runs). What this guards is a cost per request or per scrape: 4 clients for 60 s send
      // thousands of requests and the router scrapes 60 times, so such a leak adds hundreds.
      // bench:autoscale's 600 s window is the figure (0 events there).
      expect(after - before).toBeLessThanOrEqual(100);
    },
  );
  it('answers requests beyond a router’s limits with a clean 429 or 503 and Retry-After', async () => {
    await atZero();
    // The router restarted in its place with a small line and a short wait, waking nothing.
    await router.proc.stop();
    router = await startRouterProc(routerPort, ['--queue-size', '5', '--queue-timeout', '3', '--autoscale', 'off']);
    const answers = await Promise.all(Array.from({ length: 8 }, () => ask(router.base)));
    const byStatus = (s: number) => answers.filter((a) => a.status === s);
    expect(byStatus(429)).toHaveLength(3);
    expect(byStatus(503)).toHaveLength(5);
    for (const a of answers) expect(a.retryAfter).toBeGreaterThan(0);
    expect(new Set(byStatus(429).map((a) => a.code))).toEqual(new Set(['queue_full']));
    expect(new Set(byStatus(503).map((a) => a.code))).toEqual(new Set(['queue_timeout']));
  });

  it('refuses a key scoped to another model with 404, and its request wakes nothing at zero', async () => {
    await atZero();
    const keys = join(mkdtempSync(join(tmpdir(), 'llmgw-autoscale-keys-')), 'keys');
    writeFileSync(keys, `{"key": "sk-other", "id": "other-team", "models": ["other"]}\n{"key": "sk-auto", "models": ["${servedName}"]}\n`);
    // The router restarted in its place (its place in the routes workflow too), autoscaling on.
    await router.proc.stop();
    router = await startRouterProc(routerPort, ['--api-keys-file', keys]);
    const before = await view();
    const listed = async (key: string) => (await fetch(`${router.base}/v1/models`, { headers: { authorization: `Bearer ${key}` } })).text();
    expect(await listed('sk-auto')).toContain(`"id":"${servedName}"`);
    expect(await listed('sk-other')).toBe('{"object":"list","data":[]}');
    const refused = await ask(router.base, 4, 'sk-other');
    expect(refused).toMatchObject({ status: 404, code: 'model_not_found' });
    expect(refused.message).toMatch(/API key other-team may use models other; no adapter\.$/);
    // A held request wakes its deployment within a second (the router's first notice): give it three.
    await sleep(3000);
    expect(await queued(router)).toBe(0);
    const after = await view();
    expect([after.desired, after.phase, enginesOf([nodeId]).length]).toEqual([0, 'Idle', 0]);
    expect(after.autoscale?.lastDecision).toEqual(before.autoscale?.lastDecision);
  });
});
