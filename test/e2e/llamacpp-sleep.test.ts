// A real engine asleep and awake through the whole stack (issue 38): llama.cpp's llama-server on
// Gemma 3 270M, deployed with a sleep policy, put to sleep by the router's autoscaler once idle
// (llama-server's own --sleep-idle-seconds frees the model), its resident memory falling, then
// woken by a request through the router, which is answered with text by the same process.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { Client } from '@temporalio/client';
import type { DeploymentView } from '../../common/replica-types.js';
import { deploymentStatusQuery } from '../../workflows/definitions.js';
import { ROUTES_WORKFLOW_ID, routesQuery } from '../../workflows/routes/definitions.js';
import { enginesOf, eventually, inventory, runLlmgw, spawnLlmgw, undeployAndWait, uniqueId, useIsolatedFleet } from '../helpers/fleet.js';
import { spawnTestRouter } from '../helpers/router-process.js';

// The llama.cpp catalog, not catalog-e2e.yaml (a 0.2.0 worker reads that one: llamacpp.test.ts).
const CATALOG = join(__dirname, '../fixtures/catalog-llamacpp.yaml');
const fleet = useIsolatedFleet({ ownTemporal: 'llamacpp-sleep', controlWorkers: 0 });
const nodeId = uniqueId('llamasleep');
const name = uniqueId('gemma-sleep');
const served = 'gemma-llama';
let client: Client;
let routerUrl = '';

const view = (): Promise<DeploymentView> => client.workflow.getHandle(`deployment/${name}`).query(deploymentStatusQuery);

/** The route is Sleeping in the routes workflow's table, and every live router has that table. */
async function routedAsleep(): Promise<true | undefined> {
  const table = await client.workflow.getHandle(ROUTES_WORKFLOW_ID).query(routesQuery);
  const asleep = table.routes.some((r) => r.deployment === name && r.phase === 'Sleeping');
  const live = table.routers.filter((r) => r.live);
  return asleep && live.length > 0 && live.every((r) => r.applied >= table.version) ? true : undefined;
}

function rssMib(pid: number): number {
  const line = readFileSync(`/proc/${pid}/status`, 'utf8')
    .split('\n')
    .find((l) => l.startsWith('VmRSS:'));
  return Math.round(Number(line?.split(/\s+/)[1] ?? NaN) / 1024);
}

async function complete(prompt: string): Promise<{ status: number; text: string; ms: number }> {
  const started = Date.now();
  const res = await fetch(`${routerUrl}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: served, prompt, max_tokens: 6, temperature: 0 }),
  });
  const body = (await res.json()) as { choices?: Array<{ text: string }> };
  return { status: res.status, text: body.choices?.[0]?.text ?? JSON.stringify(body), ms: Date.now() - started };
}

beforeAll(async () => {
  client = fleet.client;
  const worker = spawnLlmgw(['worker', '--catalog', CATALOG]);
  fleet.workers.push(worker);
  await worker.waitForOutput(/serving task queue llmgw/, 90_000);
  await fleet.agent(nodeId, { inventory: inventory('llamax2.yaml') });
  // The router's autoscaler is what puts an idle replica to sleep (router/autoscale/idle-sleep.ts).
  routerUrl = (await spawnTestRouter()).url;
}, 180_000);

afterAll(() => undeployAndWait(client, name, [nodeId]).catch(() => undefined));

it('sleeps once idle, frees its memory, and a request through the router wakes the same llama-server', async () => {
  const deployed = await runLlmgw(
    ['deploy', served, '--name', name, '--profile', 'sleeps', '--replicas', '1', '--wait', '--timeout', '150'],
    {},
    170_000,
  );
  expect(deployed.code, deployed.output).toBe(0);
  const first = await eventually(
    'answered',
    async () => ((await complete('Hello')).status === 200 ? complete('The capital of France is') : undefined),
    30_000,
    500,
  );
  expect(first.text).toMatch(/\S/);
  const [engine] = enginesOf([nodeId]);
  const awakeMib = rssMib(engine!.pid);

  // Idle for afterSeconds (4): llama-server frees the model and the replica goes Sleeping.
  const asleep = await eventually(
    'the replica asleep on its own',
    async () => ((await view()).phase === 'Sleeping' ? view() : undefined),
    60_000,
    250,
  );
  const replica = asleep.replicas[0]!;
  expect(replica.reason).toMatch(/autoscaler:.*idle/);
  // The replica says Sleeping first, then waits for the routers to stop routing to it: until they
  // have, a request would reach llama-server itself, which wakes on its own for it.
  await eventually('every router holding requests for it', routedAsleep, 30_000, 250);
  const asleepMib = rssMib(engine!.pid);
  expect(asleepMib).toBeLessThan(awakeMib * 0.6);

  // A request through the router is held, wakes it, and is answered by the same process.
  const woken = await complete('The capital of France is');
  // The replica tells its deployment of the wake a moment after the request is answered.
  const after = await eventually(
    'the wake in the deployment view',
    async () => ((await view()).replicas[0]?.sleep?.lastWake ? view() : undefined),
    15_000,
    200,
  );
  console.log(
    `llama.cpp asleep through llmgw: RSS ${awakeMib} MiB awake, ${asleepMib} MiB asleep; the request that woke it answered in ` +
      `${woken.ms} ms ("${woken.text.trim()}"); wake recorded ${after.replicas[0]?.sleep?.lastWake?.tookMs} ms by ${after.replicas[0]?.sleep?.lastWake?.by}`,
  );
  expect(woken.status).toBe(200);
  expect(woken.text).toMatch(/\S/);
  expect(after.replicas[0]?.sleep?.lastWake?.by).toMatch(/^router:/);
  expect(enginesOf([nodeId]).map((e) => e.pid)).toEqual([engine!.pid]);
  expect(rssMib(engine!.pid)).toBeGreaterThan(asleepMib);
}, 300_000);
