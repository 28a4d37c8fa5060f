// Safe on real hosts, end to end on a real dev server: a secret passed to the agent reaches
// its engine and nothing else (no history, no log, no spec), the agent's files are its own,
// and a hand-started replica whose profile differs from what the catalog signed starts no
// engine anywhere.
import { mkdtempSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Client } from '@temporalio/client';
import { beforeAll, describe, expect, it } from 'vitest';
import { profileSnapshot } from '../../catalog/lookup.js';
import { loadCatalogFile } from '../../catalog/load.js';
import { readCatalogKeys } from '../../common/catalog-key.js';
import type { ReplicaInput, ReplicaView } from '../../common/replica-types.js';
import { signSnapshot } from '../../common/revision-signature.js';
import { replicaStatusQuery, scaleUpdate } from '../../workflows/definitions.js';
import { WorkflowFailedError } from '@temporalio/client';
import { testCatalogKeyFile } from '../helpers/catalog-key.js';
import {
  E2E_CATALOG,
  enginesOf,
  eventually,
  INVENTORIES,
  type LlmgwProcess,
  runLlmgw,
  startSimAgent,
  uniqueId,
  useIsolatedFleet,
} from '../helpers/fleet.js';

const nodeId = uniqueId('secure');
const deployment = uniqueId('secure-dep');
const secret = `hf_${Math.random().toString(36).slice(2)}${Date.now().toString(36)}SECRET`;
const wandb = `wandb_${Math.random().toString(36).slice(2)}SECRET`;

const fleet = useIsolatedFleet();
let client: Client;
let worker: LlmgwProcess;
let agent: { proc: LlmgwProcess; stateDir: string };
let envFile: string;

/** Every byte of a history, payloads decoded as text, to search for a value in any form. */
function historyText(history: unknown): string {
  return JSON.stringify(history, (_key, value: unknown) =>
    value instanceof Uint8Array ? Buffer.from(value).toString('utf8') : typeof value === 'bigint' ? value.toString() : value,
  );
}

/** The innermost cause's message: a workflow's failure wraps the activity's, which wraps why. */
function innermost(error: unknown): string {
  let e = error as Error;
  while (e.cause instanceof Error) e = e.cause;
  return e.message;
}

function filesUnder(dir: string): string[] {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile())
    .map((entry) => join(entry.parentPath, entry.name));
}

/**
 * The agent's flags. A 60 s lost grace (the default is 20 s): one test kills the agent and
 * starts it again, an agent restart, which on a loaded machine can outlast 10 s of silence
 * plus 20 s and turn the node Lost, moving replicas this test does not mean to move.
 */
const agentFlags = (): string[] => ['--pass-env', 'HF_TOKEN', '--env-file', envFile, '--lost-grace-seconds', '60'];

beforeAll(async () => {
  client = fleet.client;
  worker = fleet.workers[0]!;
  envFile = join(mkdtempSync(join(tmpdir(), 'llmgw-envfile-')), 'engines.env');
  writeFileSync(envFile, `WANDB_KEY=${wandb}\n`, { mode: 0o600 });
  agent = await fleet.agent(nodeId, {
    inventory: join(INVENTORIES, 'securex8.yaml'),
    extra: agentFlags(),
    env: { HF_TOKEN: secret },
  });
});

describe('a host that keeps its secrets and runs only what the catalog allows', () => {
  it('gives HF_TOKEN (--pass-env) and a --env-file value to the engine, and to nothing else: no history, log or spec holds them', async () => {
    const deployed = await runLlmgw(['deploy', 'secure', '--name', deployment, '--replicas', '1', '--wait', '--timeout', '90']);
    expect(deployed.code, deployed.output).toBe(0);
    const [engine] = enginesOf([nodeId]);
    expect(engine?.env).toMatchObject({ HF_TOKEN: secret, WANDB_API_KEY: wandb, FAKE_LITERAL: 'plain' });

    // The agent's files are its own: the state dir only passed through (0711, for the engine
    // user to reach the weights cache), its shards and logs 0700, specs and logs 0600.
    const { stateDir } = agent;
    expect(statSync(stateDir).mode & 0o777).toBe(0o711);
    // Bar the simulated GPUs' ledger (common/sim-gpu-ledger.ts): memory figures only, written by
    // engines under their own users, and kept only on a host whose GPUs are simulated.
    const files = filesUnder(stateDir).filter((file) => !file.startsWith(join(stateDir, 'sim-gpus')));
    expect(files.some((file) => file.endsWith('.json'))).toBe(true);
    expect(files.some((file) => file.endsWith('.log'))).toBe(true);
    for (const file of files) expect([file, statSync(file).mode & 0o777]).toEqual([file, 0o600]);

    const undeployed = await runLlmgw(['undeploy', deployment]);
    expect(undeployed.code, undeployed.output).toBe(0);

    // Every history in the namespace, every payload decoded: the values are nowhere.
    const base64 = [secret, wandb].map((value) => Buffer.from(value).toString('base64'));
    let histories = 0;
    for await (const execution of client.workflow.list()) {
      const history = await client.workflow.getHandle(execution.workflowId, execution.runId).fetchHistory();
      const text = historyText(history);
      histories++;
      for (const value of [secret, wandb, ...base64]) expect(text.includes(value), `${execution.workflowId} holds a secret`).toBe(false);
    }
    expect(histories).toBeGreaterThan(2);
    // Every file the agent wrote (engine logs included) and every line the agent and worker logged.
    for (const file of filesUnder(stateDir)) {
      const text = readFileSync(file, 'utf8');
      for (const value of [secret, wandb]) expect(text.includes(value), `${file} holds a secret`).toBe(false);
    }
    for (const output of [agent.proc.output(), worker.output(), deployed.output, undeployed.output]) {
      for (const value of [secret, wandb]) expect(output.includes(value)).toBe(false);
    }
    console.log(`searched ${histories} histories and ${filesUnder(stateDir).length} files of the agent`);
  });

  it('refuses a hand-started replica whose profile differs from what the catalog signed: no engine starts anywhere', async () => {
    const catalog = loadCatalogFile(E2E_CATALOG);
    if (!catalog.ok) throw new Error('the e2e catalog is invalid');
    const model = catalog.catalog.models.find((m) => m.name === 'secure')!;
    // What an attacker can copy from any history: a revision the control worker signed.
    const signed = signSnapshot(profileSnapshot(model, model.profiles[0]!), readCatalogKeys(testCatalogKeyFile()));
    const profile = { ...signed, env: { ...signed.env, LD_PRELOAD: '/tmp/not-in-the-catalog.so' } };
    // Under a running deployment of this model, placement signs a ticket (it names the deployment
    // and its served name) and the agent refuses the changed profile itself.
    const host = uniqueId('forged-host');
    const hosted = await runLlmgw(['deploy', 'secure', '--name', host, '--replicas', '0']);
    expect(hosted.code, hosted.output).toBe(0);
    // Under a deployment nobody started, placement refuses before any GPU is reserved.
    const orphan = uniqueId('forged');
    const cases = [
      { deployment: host, refusal: /refused shard/, why: /differ from the revision the control worker signed/ },
      { deployment: orphan, refusal: /not a running deployment of this control plane/, why: /nothing is placed for it/ },
    ];
    for (const { deployment: forged, refusal, why } of cases) {
      const replicaId = `replica/${forged}/9`;
      const input: ReplicaInput = { deployment: forged, seq: 9, profile, deploymentWorkflowId: `deployment/${forged}` };
      const handle = await client.workflow.start('replica', { workflowId: replicaId, taskQueue: 'llmgw', args: [input] });
      try {
        const reason = await eventually(
          `${replicaId} refused`,
          async () => {
            const status: ReplicaView | undefined = await handle.query(replicaStatusQuery).catch(() => undefined);
            if (status && refusal.test(status.reason)) return status.reason;
            // A refused placement may end the run: its failure says why.
            const described = await handle.describe();
            if (described.status.name !== 'RUNNING') return String(await handle.result().catch((error: unknown) => innermost(error)));
            return undefined;
          },
          60_000,
        );
        expect(reason).toMatch(why);
        expect(enginesOf([nodeId]).filter((engine) => engine.env.LLMGW_REPLICA_ID === replicaId)).toEqual([]);
        expect(agent.proc.output()).not.toMatch(new RegExp(`started shard ${forged}`));
      } finally {
        await handle.terminate('test over').catch(() => undefined);
      }
    }
    await runLlmgw(['undeploy', host]);
  });

  it('refuses a deployModel started with carried state holding args, and a replica with malformed input, naming the path', async () => {
    const name = uniqueId('carried');
    // What a continued run carries: a replica with args the catalog never had.
    const carried = { replicas: [{ seq: 1, profile: { args: ['--trust-remote-code', '--load-format', 'evil'] } }], nextSeq: 2 };
    const deployment = await client.workflow.start('deployModel', {
      workflowId: `deployment/${name}`,
      taskQueue: 'llmgw',
      args: [{ model: 'secure', name, replicas: 1, carried }],
    });
    const refused = await deployment.result().then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(refused).toBeInstanceOf(WorkflowFailedError);
    expect(String((refused as WorkflowFailedError).cause?.message)).toMatch(/carried is internal state of a continued run; leave it out/);

    const bad = uniqueId('malformed');
    const replica = await client.workflow.start('replica', {
      workflowId: `replica/${bad}/1`,
      taskQueue: 'llmgw',
      args: [{ deployment: bad, seq: 'one', profile: { engine: 'fake' }, deploymentWorkflowId: `deployment/${bad}` }],
    });
    const failed = await replica.result().then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(failed).toBeInstanceOf(WorkflowFailedError);
    const message = String((failed as WorkflowFailedError).cause?.message);
    expect(message).toMatch(/^invalid replica input: /);
    expect(message).toMatch(/\bseq: /);
    // Neither started anything on the host.
    expect(enginesOf([nodeId]).filter((engine) => [name, bad].includes(engine.env.LLMGW_DEPLOYMENT ?? ''))).toEqual([]);
    expect(agent.proc.output()).not.toMatch(new RegExp(`started shard (${name}|${bad})`));
  });

  it('stops an engine scaled away while its agent was dead exactly once when the agent returns, and places nothing on its GPUs meanwhile', async () => {
    const name = uniqueId('scaled-dead');
    const other = uniqueId('scaled-other');
    const deployed = await runLlmgw(['deploy', 'secure', '--name', name, '--replicas', '2', '--wait', '--timeout', '90']);
    expect(deployed.code, deployed.output).toBe(0);
    const of = (deploymentName: string): ReturnType<typeof enginesOf> =>
      enginesOf([nodeId]).filter((engine) => engine.env.LLMGW_REPLICA_ID?.startsWith(`replica/${deploymentName}/`));
    expect(of(name)).toHaveLength(2);
    const doomed = of(name).find((engine) => engine.env.LLMGW_REPLICA_ID === `replica/${name}/2`)!;
    const doomedGpus = (doomed.env.CUDA_VISIBLE_DEVICES ?? '').split(',');
    // While the scaled-away engine lives, no other engine may be given its GPUs: sampled throughout.
    const overlaps: string[] = [];
    let restartedAt: number | undefined;
    let stoppedAt: number | undefined;
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        const engines = enginesOf([nodeId]);
        if (engines.some((engine) => engine.pid === doomed.pid)) {
          for (const engine of engines) {
            if (engine.pid === doomed.pid) continue;
            const gpus = (engine.env.CUDA_VISIBLE_DEVICES ?? '').split(',');
            if (gpus.some((gpu) => doomedGpus.includes(gpu))) overlaps.push(`${engine.env.LLMGW_REPLICA_ID} on ${gpus.join(',')}`);
          }
        }
        await new Promise((r) => setTimeout(r, 200));
      }
    })();
    try {
      // The agent dies; the scale-down's stop cannot reach it.
      await agent.proc.kill9();
      await client.workflow.getHandle(`deployment/${name}`).executeUpdate(scaleUpdate, { args: [1] });
      // Demand for every GPU meanwhile: 7 replicas fit on the 8-GPU host only with the scaled-away GPU.
      await runLlmgw(['deploy', 'secure', '--name', other, '--replicas', '7']);
      await new Promise((r) => setTimeout(r, 5_000));
      const stateDir = agent.stateDir;
      agent = await startSimAgent(nodeId, {
        inventory: join(INVENTORIES, 'securex8.yaml'),
        stateDir,
        extra: agentFlags(),
        env: { HF_TOKEN: secret },
      });
      restartedAt = Date.now();
      await eventually('the scaled-away engine stopped', () => (of(name).length === 1 ? true : undefined), 120_000);
      stoppedAt = Date.now();
      await eventually('the other deployment on every other GPU', () => (of(other).length === 7 ? true : undefined), 120_000);
    } finally {
      sampling = false;
      await sampler;
    }
    expect(overlaps).toEqual([]);
    const shardId = doomed.env.LLMGW_SHARD_ID!;
    const stops = agent.proc.output().match(new RegExp(`stopped shard ${shardId.replace(/\./g, '\\.')}(?! \\(nothing)`, 'g')) ?? [];
    expect(stops.length, agent.proc.output()).toBeLessThanOrEqual(1);
    console.log(
      `scaled away while the agent was dead: engine ${doomed.pid} stopped ${Math.round(((stoppedAt ?? 0) - (restartedAt ?? 0)) / 100) / 10} s after the agent returned; ${stops.length} stop logged, 0 overlaps`,
    );
    await runLlmgw(['undeploy', name]);
    await runLlmgw(['undeploy', other]);
  }, 300_000);
});
