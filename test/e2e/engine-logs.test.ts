// Engine output stays on the host, end to end on a real dev server: an engine that prints the
// Hugging Face token it was given and then fails leaves that token in its log on the host
// (where `llmgw logs` reads it) and in no history, memo, search attribute or failure in the
// namespace.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Client } from '@temporalio/client';
import { beforeAll, describe, expect, it } from 'vitest';
import { eventually, INVENTORIES, type LlmgwProcess, runLlmgw, uniqueId, useIsolatedFleet } from '../helpers/fleet.js';

const nodeId = uniqueId('leaky');
const deployment = uniqueId('leaky-dep');
// `hf_` and 34 letters, as a Hugging Face token is spelled, different on every run.
const letters = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ';
const token = `hf_${Array.from({ length: 34 }, () => letters[Math.floor(Math.random() * letters.length)]).join('')}`;

const fleet = useIsolatedFleet();
let client: Client;
let worker: LlmgwProcess;
let agent: { proc: LlmgwProcess; stateDir: string };

/** Every byte of a value, payloads decoded as text, to search for a string in any form. */
function asText(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) =>
    v instanceof Uint8Array ? Buffer.from(v).toString('utf8') : typeof v === 'bigint' ? v.toString() : v,
  );
}

beforeAll(async () => {
  client = fleet.client;
  worker = fleet.workers[0]!;
  const envFile = join(mkdtempSync(join(tmpdir(), 'llmgw-envfile-')), 'engines.env');
  writeFileSync(envFile, `HF_TOKEN=${token}\n`, { mode: 0o600 });
  agent = await fleet.agent(nodeId, { inventory: join(INVENTORIES, 'leakyx8.yaml'), extra: ['--env-file', envFile] });
});

describe('an engine that prints a token and fails', () => {
  it('leaves the token in its log on the host, read by `llmgw logs`, and nowhere in the namespace', async () => {
    const deployed = await runLlmgw(['deploy', 'leaky', '--name', deployment, '--replicas', '1']);
    expect(deployed.code, deployed.output).toBe(0);
    // Two failed starts: the failure has been reported, recorded and acted on.
    await eventually(
      'two failed starts',
      () => ((agent.proc.output().match(/exited with code 2/g) ?? []).length >= 2 ? true : undefined),
      90_000,
    );

    const logs = await runLlmgw(['logs', `${deployment}/1`, '--lines', '50']);
    expect(logs.code, logs.output).toBe(0);
    expect(logs.output).toContain(`HF_TOKEN=${token}`);

    const forms = [token, Buffer.from(token).toString('base64'), token.slice(3)];
    let histories = 0;
    for await (const execution of client.workflow.list()) {
      const handle = client.workflow.getHandle(execution.workflowId, execution.runId);
      // Histories (payloads, failures, memos and search attributes as recorded) and what a
      // describe shows besides: pending activities' last failures, current memo and attributes.
      const texts = [asText(await handle.fetchHistory()), asText((await handle.describe()).raw), asText(execution)];
      histories++;
      for (const text of texts)
        for (const form of forms) expect(text.includes(form), `${execution.workflowId} holds the token`).toBe(false);
    }
    expect(histories).toBeGreaterThan(1);
    for (const output of [worker.output(), deployed.output]) expect(output.includes(token)).toBe(false);
    console.log(`searched ${histories} workflows for a token the engine printed; it is only in its log on the host`);
    await runLlmgw(['undeploy', deployment]);
  }, 180_000);
});
