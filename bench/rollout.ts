// npm run bench:rollout — rolling 8 replicas on 8 simulated hosts (fake engine, 2 s load time)
// to a revision with other args, under router load: once with room to surge (a replica per
// GPU) and once on full hosts (a replica per host: drain-first). Prints the total rollout time,
// the longest stretch with fewer than 8 routable replicas, and the requests that failed
// (goal 0), side by side; then how soon a drain with nothing in flight stops its engine
// (goal 1 s). Figures, not asserts. `-- --weights`: a rollout with weights to fetch, with and
// without fetching ahead (bench/rollout-weights.ts).
import { request } from 'undici';
import { deploymentStatusQuery, rolloutUpdate, scaleUpdate } from '../workflows/definitions.js';
import type { DeploymentView } from '../common/replica-types.js';
import { startStack, type Stack } from './stack.js';
import { rolloutWithWeights } from './rollout-weights.js';

const REPLICAS = 8;

type DeploymentHandle = ReturnType<Stack['client']['workflow']['getHandle']>;

/** Polls a deployment's status until `done` holds; fails after `timeoutMs`. */
async function untilView(
  handle: DeploymentHandle,
  what: string,
  done: (view: DeploymentView) => boolean,
  timeoutMs: number,
  everyMs: number,
): Promise<void> {
  for (const started = Date.now(); ;) {
    const view = await handle.query(deploymentStatusQuery).catch(() => undefined);
    if (view && done(view)) return;
    if (Date.now() - started > timeoutMs) throw new Error(`${handle.workflowId}: ${what} not within ${timeoutMs / 1000} s`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

async function roll(stack: Stack, from: string, to: string): Promise<string> {
  const name = `roll-${from}-${Date.now().toString(36)}`;
  const handle = stack.client.workflow.getHandle(`deployment/${name}`);
  await stack.client.workflow.start('deployModel', {
    workflowId: handle.workflowId,
    taskQueue: 'llmgw',
    args: [{ model: 'rollbench', name, profile: from, replicas: REPLICAS }],
  });
  await untilView(handle, 'Ready', (v) => v.phase === 'Ready', 300_000, 200);
  await new Promise((r) => setTimeout(r, 2_000)); // routers have every replica

  let running = true;
  let ok = 0;
  let failed = 0;
  const clients = Array.from({ length: 4 }, async () => {
    while (running) {
      try {
        const response = await request(`${stack.routerUrl}/v1/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'rollbench', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] }),
        });
        await response.body.text();
        if (response.statusCode === 200) ok++;
        else failed++;
      } catch {
        failed++;
      }
    }
  });

  let below = 0;
  let longestBelow = 0;
  let belowSince: number | undefined;
  const started = Date.now();
  await handle.executeUpdate(rolloutUpdate, { args: [{ profile: to }] });
  let mode = '';
  for (;;) {
    const view = await handle.query(deploymentStatusQuery);
    const routable = view.replicas.filter((r) => r.phase === 'Ready').length;
    if (routable < REPLICAS) belowSince ??= Date.now();
    else if (belowSince !== undefined) {
      longestBelow = Math.max(longestBelow, Date.now() - belowSince);
      below += Date.now() - belowSince;
      belowSince = undefined;
    }
    mode = view.rollout?.mode ?? mode;
    if (view.rollout?.state === 'Complete' || view.rollout?.state === 'RolledBack' || view.rollout?.state === 'Failed') {
      if (view.rollout.state !== 'Complete') console.log(`  ${name}: ${view.rollout.state}: ${view.rollout.reason}`);
      break;
    }
    if (Date.now() - started > 900_000) throw new Error(`${name}: rollout not done in 900 s`);
    await new Promise((r) => setTimeout(r, 100));
  }
  const total = Date.now() - started;
  running = false;
  await Promise.all(clients);
  await stack.llmgw(['undeploy', name]);
  return `${from} → ${to} (${mode}): rollout ${(total / 1000).toFixed(1)} s · longest with < ${REPLICAS} routable ${(longestBelow / 1000).toFixed(1)} s (${(below / 1000).toFixed(1)} s in all) · requests ${ok} ok, ${failed} failed`;
}

/**
 * Scale → each idle replica Stopped (its engine's exit confirmed by the agent and its GPUs
 * released), for `rounds` scale-downs of one replica with no request in flight.
 */
async function idleDrains(stack: Stack, rounds: number): Promise<string> {
  const name = `idle-${Date.now().toString(36)}`;
  const handle = stack.client.workflow.getHandle(`deployment/${name}`);
  await stack.client.workflow.start('deployModel', {
    workflowId: handle.workflowId,
    taskQueue: 'llmgw',
    args: [{ model: 'rollbench', name, profile: 'a1', replicas: rounds + 1 }],
  });
  await untilView(handle, 'Ready', (v) => v.phase === 'Ready' && v.ready === rounds + 1, 120_000, 10);
  const took: number[] = [];
  for (let left = rounds; left > 0; left--) {
    const stoppedBefore = (await handle.query(deploymentStatusQuery)).replicas.filter((r) => r.phase === 'Stopped').length;
    const started = Date.now();
    await handle.executeUpdate(scaleUpdate, { args: [left] });
    await untilView(
      handle,
      'the drained replica Stopped',
      (v) => v.replicas.filter((r) => r.phase === 'Stopped').length > stoppedBefore,
      120_000,
      10,
    );
    took.push(Date.now() - started);
  }
  await stack.llmgw(['undeploy', name]);
  took.sort((a, b) => a - b);
  return `idle drain, scale → replica Stopped (engine gone, GPUs released): median ${took[Math.floor(took.length / 2)]} ms, longest ${took[took.length - 1]} ms of ${took.length} (goal 1,000 ms)`;
}

async function main(): Promise<void> {
  if (process.argv.includes('--weights')) return rolloutWithWeights();
  const stack = await startStack({ hosts: 8, router: true });
  try {
    console.log(
      `rollout benchmark: ${REPLICAS} replicas on 8 simulated 8×H100 hosts, fake engine with a 2 s load time, 4 clients through the router, dev server in memory`,
    );
    console.log(`  ${await roll(stack, 'a1', 'b1')}`);
    console.log(`  ${await roll(stack, 'a8', 'b8')}`);
    console.log(`  ${await idleDrains(stack, 5)}`);
  } finally {
    await stack.stop();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
