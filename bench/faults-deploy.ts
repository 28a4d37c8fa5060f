// The deploy rows of bench:faults: 8 replicas deployed clean and through a slow, lossy link
// between the agents and Temporal (200 ms each way; 5 % of new connections reset; open ones
// killed in 5 % of 1 s windows), alternating, DEPLOY_ROUNDS times each. Twice: with the fake
// engine's instant start, where the figure is the control plane's own time and a task lost to
// a dying connection (one heartbeat timeout) weighs most; and with an engine that loads for
// 20 s, as the engine of a small model does (vLLM's load, compile and CUDA graphs take longer).
import { LOSSY_CONNECTIONS, SLOW_LOSSY_LINK, startConnectionFaults, type ConnectionFaultTally } from '../test/helpers/netns/toxiproxy.js';
import type { NetStack } from './net-stack.js';
import { median, status, until, type Row } from './faults-common.js';

/** Clean and faulty deploys each run this often, alternating. */
const DEPLOY_ROUNDS = 3;
const REPLICAS = 8;

async function deployTime(stack: NetStack, profile: string, label: string): Promise<{ ms: number; failed: number; replicas: number }> {
  const name = `lat-${label}-${Date.now().toString(36)}`;
  const started = Date.now();
  if ((await stack.llmgw(['deploy', 'bench', '--name', name, '--replicas', String(REPLICAS), '--profile', profile])) !== 0)
    throw new Error(`deploy ${name} failed`);
  const failed = new Set<string>();
  const ms = await until(
    `${REPLICAS} replicas Ready`,
    async () => {
      const view = await status(stack.client, name);
      for (const r of view.replicas) if (r.phase === 'Failed') failed.add(r.replicaId);
      return view.replicas.filter((r) => r.phase === 'Ready').length === REPLICAS ? Date.now() - started : undefined;
    },
    300_000,
  );
  const replicas = (await status(stack.client, name)).replicas.length;
  await stack.llmgw(['undeploy', name]);
  return { ms, failed: failed.size, replicas };
}

/** Two rows, clean and lossy, for deploys of `profile` (`engine`: how its engine starts, for the table). */
export async function deployRows(stack: NetStack, profile: string, engine: string): Promise<Row[]> {
  // One deploy first, unmeasured: the first engines of a run start slower than the rest.
  await deployTime(stack, profile, 'warm');
  const clean: number[] = [];
  const slow: number[] = [];
  let failedClean = 0;
  let failedSlow = 0;
  let replaced = 0;
  const tally: ConnectionFaultTally = { windows: 0, resets: 0, drops: 0 };
  for (let round = 0; round < DEPLOY_ROUNDS; round++) {
    const c = await deployTime(stack, profile, `clean${round}`);
    clean.push(c.ms);
    failedClean += c.failed;
    await stack.toxiproxy.addToxics(SLOW_LOSSY_LINK);
    const faults = startConnectionFaults(
      stack.hosts.map((h) => h.path),
      LOSSY_CONNECTIONS,
    );
    try {
      const s = await deployTime(stack, profile, `slow${round}`);
      slow.push(s.ms);
      failedSlow += s.failed;
      replaced += s.replicas - REPLICAS;
    } finally {
      const t = await faults.stop();
      tally.windows += t.windows;
      tally.resets += t.resets;
      tally.drops += t.drops;
      await stack.toxiproxy.clearToxics();
    }
  }
  const each = (values: number[]): string => values.map((v) => (v / 1000).toFixed(1)).join(', ');
  return [
    {
      fault: `deploy ${REPLICAS} replicas (${engine}), clean (median of ${DEPLOY_ROUNDS}: ${each(clean)} s)`,
      recoverMs: median(clean),
      recovered: 'all Ready',
      failed: `${failedClean} replicas Failed`,
      fenced: '—',
      twice: 0,
    },
    {
      fault:
        `deploy ${REPLICAS} (${engine}), 200 ms each way, 5 % of new conns reset, open conns killed in 5 % of 1 s windows ` +
        `(${tally.resets} closed, ${tally.drops} dropped 3 s, in ${tally.windows} windows × ${stack.hosts.length} hosts; ${each(slow)} s)`,
      recoverMs: median(slow),
      recovered: `all Ready (${(median(slow) / median(clean)).toFixed(2)}× clean)`,
      failed: `${failedSlow} replicas Failed, ${replaced} replaced`,
      fenced: '—',
      twice: 0,
    },
  ];
}
