// npm run bench:swap — more models than GPUs: 8 deployments of fake-engine models on one simulated
// host of 2 GPUs that each fit one awake engine, under Zipf traffic over the 8 models, twice in one
// run: with sleep (replicas sleep and are woken for a request; a wake on a full GPU first puts the
// least recently woken engine there to sleep) and without (scale to zero and cold starts). Prints,
// side by side: requests and failures, the time to first token, the time from each wake (or start)
// to the first token of a request that waited for it, against the engine's wake time plus its
// TTFT, and the moments a GPU held more awake engines than fit, from the node's history. Figures,
// not asserts (docs/sleep.md, "bench:swap").
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Client } from '@temporalio/client';
import { deploymentStatusQuery, sleepReplicaUpdate, undeployUpdate } from '../workflows/definitions.js';
import type { DeploymentView } from '../common/replica-types.js';
import { percentile } from './fleet-measure.js';
import { startStack, type Stack } from './stack.js';
import { driveZipf } from './swap-traffic.js';
import { recordedWakes, replicaStarts, toFirstToken } from './swap-histories.js';
import { figures, p50p90, printSideBySide, printWakeBreakdown, type NodeCheck, type PhaseFigures } from './swap-report.js';
import { overCommittedMoments } from './swap-node.js';

const MODELS = 8;
const PHASE_S = Number(process.env.BENCH_SWAP_SECONDS ?? 180);
const CLIENTS = 4;
const THINK_MS = 400;
const MAX_TOKENS = 16;
const SEED = 38;
/** The fake engine: a cold start loads for LOAD_S; a level-1 wake takes WAKE_S (vLLM's blog: 0.26–0.85 s on an A100). */
const LOAD_S = 8;
const WAKE_S = 0.5;
const TOKENS_PER_SECOND = 200;
/** The sleep policy: idle this long, asleep; a woken replica stays awake at least MIN_AWAKE_S. */
const SLEEP = { afterSeconds: 20, level: 1, minAwakeSeconds: 2 };
/** Without sleep: scale to zero after this long with no request. */
const AUTOSCALE = { min: 0, max: 1, idleToZeroSeconds: 20 };

const wait = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

function writeFixtures(): { inventory: string; catalog: string } {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-bench-swap-'));
  const gpu = (index: number): string =>
    `  - { index: ${index}, name: NVIDIA H100 80GB HBM3, memoryTotalMib: 1000, computeCapability: "9.0", numaNode: 0, pciBusId: "00000000:1${index}:00.0" }\n`;
  const inventory = join(dir, 'swapx2.yaml');
  writeFileSync(inventory, `gpuClass: SWAP\ncudaVersion: "12.4"\ndriverVersion: "550.54.15"\ngpus:\n${gpu(0)}${gpu(1)}`);
  const args = `["--load-time", "${LOAD_S}", "--wake-seconds", "${WAKE_S}", "--tokens-per-second", "${TOKENS_PER_SECOND}"]`;
  const profile = (name: string, extra: string): string =>
    `      - { name: ${name}, engine: fake, gpuClass: SWAP, gpusPerNode: 1, startupTimeoutSeconds: 120, args: ${args}${extra} }\n`;
  let yaml = 'defaults: { drainGraceSeconds: 1, maxReplicas: 2 }\nmodels:\n';
  for (let i = 0; i < MODELS; i++) {
    yaml += `  - name: swap-${i}\n    source: engine://llmgw/fake-swap-${i}\n    profiles:\n`;
    yaml +=
      profile(
        'sleeps',
        `, sleep: { ${Object.entries(SLEEP)
          .map(([key, value]) => `${key}: ${value}`)
          .join(', ')} }`,
      ) + profile('cold', '');
  }
  const catalog = join(dir, 'catalog.yaml');
  writeFileSync(catalog, yaml);
  return { inventory, catalog };
}

async function view(client: Client, name: string): Promise<DeploymentView | undefined> {
  return client.workflow
    .getHandle(`deployment/${name}`)
    .query(deploymentStatusQuery)
    .catch(() => undefined);
}

async function until<T>(what: string, timeoutMs: number, probe: () => Promise<T | undefined>): Promise<T> {
  for (const started = Date.now(); Date.now() - started < timeoutMs; await wait(250)) {
    const value = await probe();
    if (value !== undefined) return value;
  }
  throw new Error(`${what}: not within ${timeoutMs / 1000} s`);
}

/** Deploys the 8 with sleep, one at a time, each put to sleep once Ready so the next finds room. */
async function deploySleepers(client: Client, names: string[]): Promise<void> {
  for (const [i, name] of names.entries()) {
    await client.workflow.start('deployModel', {
      workflowId: `deployment/${name}`,
      taskQueue: 'llmgw',
      args: [{ model: `swap-${i}`, name, profile: 'sleeps', replicas: 1 }],
    });
    const ready = await until(`${name} Ready`, 120_000, async () =>
      (await view(client, name))?.phase === 'Ready' ? view(client, name) : undefined,
    );
    for (const replica of ready!.replicas) {
      await client.workflow
        .getHandle(replica.replicaId)
        .executeUpdate(sleepReplicaUpdate, { args: [{ by: 'bench:swap', force: true, reason: 'placing the next model' }] });
    }
  }
}

/** Deploys the 8 without sleep, autoscaled to zero, and waits for the ones without a GPU to settle at zero. */
async function deployCold(client: Client, names: string[]): Promise<void> {
  for (const [i, name] of names.entries()) {
    await client.workflow.start('deployModel', {
      workflowId: `deployment/${name}`,
      taskQueue: 'llmgw',
      args: [{ model: `swap-${i}`, name, profile: 'cold', autoscale: AUTOSCALE }],
    });
  }
  await until('the cold deployments settled (each Ready or at zero)', 180_000, async () => {
    const views = await Promise.all(names.map((name) => view(client, name)));
    return views.every((v) => v && (v.phase === 'Ready' || v.desired === 0)) ? true : undefined;
  });
}

async function undeployAll(client: Client, names: string[]): Promise<void> {
  await Promise.all(
    names.map(async (name) => {
      const handle = client.workflow.getHandle(`deployment/${name}`);
      await handle.executeUpdate(undeployUpdate).catch(() => undefined);
      await handle.result().catch(() => undefined);
    }),
  );
}

/** The same traffic for both halves: the seed makes the sequence of models the same. */
function zipfTraffic(stack: Stack, models: string[]): ReturnType<typeof driveZipf> {
  return driveZipf({
    routerUrl: stack.routerUrl!,
    models,
    clients: CLIENTS,
    durationMs: PHASE_S * 1000,
    thinkMs: THINK_MS,
    maxTokens: MAX_TOKENS,
    seed: SEED,
  });
}

/** The half with sleep: the sleepers placed, an awake TTFT measured, the traffic, then what histories say. */
async function sleepHalf(
  stack: Stack,
  sleepers: string[],
  models: string[],
): Promise<{ figures: PhaseFigures; awakeTtftMs: number; node: NodeCheck }> {
  await deploySleepers(stack.client, sleepers);
  // The TTFT of an awake engine, for the goal's bound: one model woken, then asked again.
  const warm = await driveZipf({
    routerUrl: stack.routerUrl!,
    models: ['swap-0'],
    clients: 1,
    durationMs: 4_000,
    thinkMs: 100,
    maxTokens: MAX_TOKENS,
    seed: 1,
  });
  const awakeTtftMs = percentile(
    warm
      .slice(1)
      .filter((r) => r.firstTokenAt !== undefined)
      .map((r) => r.firstTokenAt! - r.sentAt),
    50,
  );
  const started = Date.now();
  const requests = await zipfTraffic(stack, models);
  const deployments = sleepers.map((name, i) => ({ name, model: models[i]! }));
  const recorded = await recordedWakes(stack.client, deployments);
  const wakes = recorded.wakes.filter((w) => w.acceptedAt >= started && !w.alreadyAwake);
  printWakeBreakdown(
    wakes,
    recorded.sleeps.filter((x) => x.acceptedAt >= started),
    requests,
  );
  // From the engines' wake (room found) to the first token: the wake's own cost; the wait for room is printed above.
  const moments = wakes.map((w) => ({ model: w.model, at: w.engineWakeAt ?? w.acceptedAt, sentBy: w.completedAt }));
  const node = await overCommittedMoments(stack.client, stack.nodeIds);
  await undeployAll(stack.client, sleepers);
  return { figures: figures(requests, toFirstToken(moments, requests), wakes.length), awakeTtftMs, node };
}

/** The half without sleep: scale to zero and cold starts under the same traffic. */
async function coldHalf(stack: Stack, colds: string[], models: string[]): Promise<PhaseFigures> {
  await deployCold(stack.client, colds);
  const started = Date.now();
  const requests = await zipfTraffic(stack, models);
  const deployments = colds.map((name, i) => ({ name, model: models[i]! }));
  const starts = (await replicaStarts(stack.client, deployments)).filter((x) => x.startedAt >= started);
  const engines = starts.filter((x) => x.engineStartAt !== undefined);
  console.log(
    `  cold starts: ${starts.length} replicas started; p50 / p90: waited for a GPU ${p50p90(engines.map((x) => x.engineStartAt! - x.startedAt))}`,
  );
  // From the engine's start (a GPU found) to the first token of a request that waited for it (sent before it came up).
  const moments = engines.map((x) => ({ model: x.model, at: x.engineStartAt!, sentBy: x.engineStartAt! + LOAD_S * 1000 }));
  await undeployAll(stack.client, colds);
  return figures(requests, toFirstToken(moments, requests), engines.length);
}

async function main(): Promise<void> {
  // BENCH_SWAP_HALVES=sleep (or cold) runs one half only, for a quicker look.
  const halves = (process.env.BENCH_SWAP_HALVES ?? 'sleep,cold').split(',');
  const { inventory, catalog } = writeFixtures();
  const stack = await startStack({ hosts: 1, router: true, catalog, agentArgs: () => ['--gpus', inventory] });
  const tag = Date.now().toString(36);
  const models = Array.from({ length: MODELS }, (_, i) => `swap-${i}`);
  try {
    console.log(
      `swap benchmark: ${MODELS} models on one simulated host of 2 GPUs (each fits one awake engine), ${CLIENTS} clients, ` +
        `Zipf (s = 1) over the models, ${PHASE_S} s per half; fake engine: ${LOAD_S} s cold load, ${WAKE_S} s level-1 wake, ${TOKENS_PER_SECOND} tokens/s, ${MAX_TOKENS} tokens`,
    );
    console.log(`  sleep policy ${JSON.stringify(SLEEP)}; without sleep: autoscale ${JSON.stringify(AUTOSCALE)}`);
    const none: PhaseFigures = { requests: 0, failed: new Map(), ttft: [], held: [], toFirstToken: [], moments: 0 };
    const sleep = halves.includes('sleep')
      ? await sleepHalf(
          stack,
          models.map((m) => `${m}-sleeps-${tag}`),
          models,
        )
      : { figures: none, awakeTtftMs: NaN, node: { overCommitted: NaN, updates: 0, maxLoad: NaN } };
    const cold = halves.includes('cold')
      ? await coldHalf(
          stack,
          models.map((m) => `${m}-cold-${tag}`),
          models,
        )
      : none;
    printSideBySide(sleep.figures, cold, { wakeSeconds: WAKE_S, awakeTtftMs: sleep.awakeTtftMs }, sleep.node);
  } finally {
    await stack.stop();
  }
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    console.error(error);
    process.exit(1);
  },
);
