// Safe on real hosts, end to end on a real dev server: a secret passed to the agent reaches
// its engine and nothing else (no history, no log, no spec), the agent's files are its own,
// and a hand-started replica whose profile differs from what the catalog signed starts no
// engine anywhere.
import { mkdtempSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Client } from '@temporalio/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { profileSnapshot } from '../../catalog/lookup.js';
import { loadCatalogFile } from '../../catalog/load.js';
import { readCatalogKeys } from '../../common/catalog-key.js';
import type { ReplicaInput, ReplicaView } from '../../common/replica-types.js';
import { signSnapshot } from '../../common/revision-signature.js';
import { replicaStatusQuery } from '../../workflows/definitions.js';
import { testCatalogKeyFile } from '../helpers/catalog-key.js';
import {
  E2E_CATALOG,
  INVENTORIES,
  enginesOf,
  eventually,
  killEnginesOf,
  runLlmgw,
  spawnControlWorker,
  startSimAgent,
  stopAll,
  type LlmgwProcess,
} from '../helpers/processes.js';
import { testClient, uniqueId } from '../helpers/temporal.js';

const nodeId = uniqueId('secure');
const deployment = uniqueId('secure-dep');
const secret = `hf_${Math.random().toString(36).slice(2)}${Date.now().toString(36)}SECRET`;
const wandb = `wandb_${Math.random().toString(36).slice(2)}SECRET`;

let client: Client;
let closeClient: () => Promise<void>;
let worker: LlmgwProcess;
let agent: { proc: LlmgwProcess; stateDir: string };

/** Every byte of a history, payloads decoded as text, to search for a value in any form. */
function historyText(history: unknown): string {
  return JSON.stringify(history, (_key, value: unknown) =>
    value instanceof Uint8Array ? Buffer.from(value).toString('utf8') : typeof value === 'bigint' ? value.toString() : value,
  );
}

function filesUnder(dir: string): string[] {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile())
    .map((entry) => join(entry.parentPath, entry.name));
}

beforeAll(async () => {
  ({ client, close: closeClient } = await testClient());
  worker = await spawnControlWorker();
  const envFile = join(mkdtempSync(join(tmpdir(), 'llmgw-envfile-')), 'engines.env');
  writeFileSync(envFile, `WANDB_KEY=${wandb}\n`, { mode: 0o600 });
  agent = await startSimAgent(nodeId, {
    inventory: join(INVENTORIES, 'securex8.yaml'),
    extra: ['--pass-env', 'HF_TOKEN', '--env-file', envFile],
    env: { HF_TOKEN: secret },
  });
});

afterAll(async () => {
  await killEnginesOf([nodeId]);
  await stopAll();
  await closeClient();
});

describe('a host that keeps its secrets and runs only what the catalog allows', () => {
  it('gives HF_TOKEN (--pass-env) and a --env-file value to the engine, and to nothing else: no history, log or spec holds them', async () => {
    const deployed = await runLlmgw(['deploy', 'secure', '--name', deployment, '--replicas', '1', '--wait', '--timeout', '90']);
    expect(deployed.code, deployed.output).toBe(0);
    const [engine] = enginesOf([nodeId]);
    expect(engine?.env).toMatchObject({ HF_TOKEN: secret, WANDB_API_KEY: wandb, FAKE_LITERAL: 'plain' });

    // The agent's files are its own: state dir 0700, specs and logs 0600.
    const { stateDir } = agent;
    expect(statSync(stateDir).mode & 0o777).toBe(0o700);
    const files = filesUnder(stateDir);
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
    const forged = uniqueId('forged');
    const input: ReplicaInput = {
      deployment: forged,
      seq: 1,
      profile: { ...signed, env: { ...signed.env, LD_PRELOAD: '/tmp/not-in-the-catalog.so' } },
      deploymentWorkflowId: `deployment/${forged}`,
    };
    const handle = await client.workflow.start('replica', { workflowId: `replica/${forged}/1`, taskQueue: 'llmgw', args: [input] });
    try {
      const view = await eventually(
        'the start refused',
        async () => {
          const status: ReplicaView = await handle.query(replicaStatusQuery);
          return /refused shard/.test(status.reason) ? status : undefined;
        },
        60_000,
      );
      expect(view.reason).toMatch(/differ from the revision the control worker signed/);
      expect(enginesOf([nodeId]).filter((engine) => engine.env.LLMGW_REPLICA_ID === `replica/${forged}/1`)).toEqual([]);
      expect(agent.proc.output()).not.toMatch(new RegExp(`started shard ${forged}`));
    } finally {
      await handle.terminate('test over').catch(() => undefined);
    }
  });
});
