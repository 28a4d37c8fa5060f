// A real engine through the whole lifecycle: llama.cpp's llama-server on Gemma 3 270M, placed,
// health-waited and routed by llmgw, asked by OpenAI's official Python client, killed and
// restarted, adopted by a restarted agent, rolled to another --ctx-size under load, autoscaled
// from its own metrics, and woken from zero with requests held. The test setup builds
// llama-server and assembles the model once per machine (test/setup/install-tools.ts).
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client } from '@temporalio/client';
import type { DeploymentView } from '../../common/replica-types.js';
import { readCmdline } from '../../agent/supervisor/processes/proc.js';
import { deploymentStatusQuery, setAutoscaleUpdate } from '../../workflows/definitions.js';
import { startLoad, summarise } from '../helpers/load.js';
import {
  enginesOf,
  eventually,
  inventory,
  runLlmgw,
  sleep,
  spawnLlmgw,
  undeployAndWait,
  uniqueId,
  useIsolatedFleet,
} from '../helpers/fleet.js';
import { spawnTestRouter } from '../helpers/router-process.js';
import { toolProgram } from '../setup/tools.js';

const execFileAsync = promisify(execFile);
// Its own catalog and control worker: the shared e2e catalog is also read by a 0.2.0 worker
// (release-upgrade.test.ts), which does not know the llamacpp engine.
const CATALOG = join(__dirname, '../fixtures/catalog-llamacpp.yaml');
const fleet = useIsolatedFleet({ ownTemporal: 'llamacpp', controlWorkers: 0 });
const nodeId = uniqueId('llama');
const name = uniqueId('gemma');
const served = 'gemma-llama';
let client: Client;
let routerUrl = '';
let agent: { stateDir: string; range: string };

const view = (): Promise<DeploymentView> => client.workflow.getHandle(`deployment/${name}`).query(deploymentStatusQuery);
const engines = (): { pid: number; argv: string[] }[] =>
  enginesOf([nodeId]).flatMap((e) => {
    const argv = readCmdline(e.pid);
    return argv ? [{ pid: e.pid, argv }] : [];
  });

/** OpenAI's Python client against the router; the last line it prints is JSON. */
async function python<T>(code: string): Promise<T> {
  const { stdout } = await execFileAsync(toolProgram('openai', 'python'), ['-c', code], {
    env: { PATH: process.env.PATH ?? '', OPENAI_BASE_URL: `${routerUrl}/v1`, OPENAI_API_KEY: 'unused' },
    timeout: 120_000,
  });
  return JSON.parse(stdout.trim().split('\n').pop() ?? '') as T;
}

async function complete(prompt: string, maxTokens = 8): Promise<{ status: number; text: string }> {
  const res = await fetch(`${routerUrl}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: served, prompt, max_tokens: maxTokens, temperature: 0 }),
  });
  const body = (await res.json()) as { choices?: Array<{ text: string }> };
  return { status: res.status, text: body.choices?.[0]?.text ?? JSON.stringify(body) };
}

beforeAll(async () => {
  client = fleet.client;
  const worker = spawnLlmgw(['worker', '--catalog', CATALOG]);
  fleet.workers.push(worker);
  await worker.waitForOutput(/serving task queue llmgw/, 90_000);
  agent = await fleet.agent(nodeId, { inventory: inventory('llamax2.yaml') });
  routerUrl = (await spawnTestRouter(['--debug-headers'])).url;
  const deployed = await runLlmgw(
    ['deploy', served, '--name', name, '--profile', 'ctx4k', '--replicas', '1', '--wait', '--timeout', '150'],
    {},
    170_000,
  );
  expect(deployed.code, deployed.output).toBe(0);
  await eventually('routed', async () => ((await complete('Hello', 1)).status === 200 ? true : undefined), 30_000, 500);
}, 240_000);

afterAll(() => undeployAndWait(client, name, [nodeId]));

describe('llama.cpp serving Gemma 3 270M', () => {
  it('answers the official Python client: Paris at temperature 0, and a streamed chat that reports usage', async () => {
    const answer = await python<{ text: string; usage: { total_tokens: number } }>(`
import json, openai
c = openai.OpenAI()
r = c.completions.create(model='${served}', prompt='The Eiffel Tower is located in the city of', max_tokens=8, temperature=0)
print(json.dumps({'text': r.choices[0].text, 'usage': r.usage.model_dump()}))`);
    const streamed = await python<{ chunks: number; usage: { completion_tokens: number } | null; finish: string | null }>(`
import json, openai
c = openai.OpenAI()
chunks, usage, finish = 0, None, None
for chunk in c.chat.completions.create(model='${served}', messages=[{'role': 'user', 'content': 'Say hello.'}], max_tokens=8, stream=True, stream_options={'include_usage': True}):
    chunks += 1
    if chunk.usage: usage = chunk.usage.model_dump()
    if chunk.choices and chunk.choices[0].finish_reason: finish = chunk.choices[0].finish_reason
print(json.dumps({'chunks': chunks, 'usage': usage, 'finish': finish}))`);
    const raw = await (
      await fetch(`${routerUrl}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: served, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 4, stream: true }),
      })
    ).text();
    console.log(`Gemma on llama.cpp: "${answer.text}"; streamed ${streamed.chunks} chunks, usage ${JSON.stringify(streamed.usage)}`);
    expect(answer.text).toMatch(/Paris/);
    expect(answer.usage.total_tokens).toBeGreaterThan(0);
    expect(streamed.usage?.completion_tokens).toBeGreaterThan(0);
    expect(streamed.finish).toMatch(/stop|length/);
    expect(raw.trimEnd().endsWith('data: [DONE]')).toBe(true);
  });

  it('shows the replica with its pinned GGUF in llmgw status, and llama-server’s own log in llmgw logs', async () => {
    const status = await runLlmgw(['status', name]);
    expect(status.output).toMatch(/Ready/);
    expect(status.output).toMatch(/ctx4k/);
    // The GGUF pinned at deploy: every agent checks these bytes before llama-server reads them.
    expect(status.output).toMatch(/weights file:\/\/\S+gemma-3-270m@sha256:[0-9a-f]{64}/);
    const logs = await runLlmgw(['logs', `${name}/1`, '-n', '200']);
    expect(logs.code, logs.output).toBe(0);
    expect(logs.output).toMatch(/llama_server|load_model|server is listening|listening on/);
  });

  it('rolls out to another --ctx-size under a client loop with no failed request', async () => {
    const load = startLoad({ routerUrl, model: served, plainClients: 1 });
    await sleep(2_000);
    const rolled = await runLlmgw(['rollout', name, '--profile', 'ctx8k', '--wait', '--timeout', '200'], {}, 220_000);
    const samples = await load.stop();
    console.log(`llama.cpp rollout: ${summarise(samples)}`);
    expect(rolled.code, rolled.output).toBe(0);
    expect(samples.length).toBeGreaterThan(0);
    expect(samples.filter((s) => !s.ok)).toEqual([]);
    expect(engines().map((e) => e.argv.join(' '))).toEqual([expect.stringMatching(/--ctx-size 8192/)]);
  }, 240_000);

  it('restarts llama-server after kill -9 and serves again', async () => {
    const [before] = engines();
    expect(before?.argv.join(' ')).toMatch(/--model \S+\.gguf/);
    process.kill(before!.pid, 'SIGKILL');
    const after = await eventually(
      'a new llama-server serving',
      async () => {
        const now = engines()[0];
        if (!now || now.pid === before!.pid) return undefined;
        return (await complete('The capital of France is', 4)).status === 200 ? now : undefined;
      },
      120_000,
      500,
    );
    console.log(`kill -9 of pid ${before!.pid}: pid ${after.pid} serves`);
    expect((await view()).phase).toBe('Ready');
  }, 150_000);

  it('adopts the same llama-server pid when its agent is killed and started again', async () => {
    const [before] = engines();
    await fleet.agentOf(nodeId).kill9();
    const restarted = await fleet.agent(nodeId, { inventory: inventory('llamax2.yaml'), stateDir: agent.stateDir, range: agent.range });
    await restarted.proc.waitForOutput(new RegExp(`adopted shard \\S+: pid ${before!.pid}`), 60_000);
    await eventually('Ready after adoption', async () => ((await view()).phase === 'Ready' ? true : undefined), 60_000, 500);
    expect(engines().map((e) => e.pid)).toEqual([before!.pid]);
    // Served throughout, by the adopted engine: five answers a second apart.
    for (let i = 0; i < 5; i++) {
      expect((await complete('One, two, three,', 4)).status).toBe(200);
      await sleep(1000);
    }
  }, 120_000);

  it('scales up under load from llama.cpp’s own metrics, back down, to zero, and wakes with every held request answered', async () => {
    const handle = client.workflow.getHandle(`deployment/${name}`);
    await handle.executeUpdate(setAutoscaleUpdate, { args: [{ min: 1, max: 2, target: 1, upAfterSeconds: 2, downAfterSeconds: 6 }] });
    // Two slots busy on the one engine, more queued (llamacpp:requests_processing and _deferred).
    const load = startLoad({ routerUrl, model: served, plainClients: 4 });
    const up = await eventually('two replicas Ready', async () => ((await view()).ready === 2 ? view() : undefined), 150_000, 500);
    await load.stop();
    console.log(`scaled up: ${up.autoscale?.lastDecision?.reason ?? ''}`);
    const down = await eventually('back to one', async () => ((await view()).desired === 1 ? view() : undefined), 90_000, 500);
    console.log(`scaled down: ${down.autoscale?.lastDecision?.reason ?? ''}`);

    await handle.executeUpdate(setAutoscaleUpdate, { args: [{ min: 0, max: 1, idleToZeroSeconds: 3 }] });
    await eventually(
      'Idle with no engine',
      async () => ((await view()).phase === 'Idle' && engines().length === 0 ? true : undefined),
      90_000,
      500,
    );
    const held = await Promise.all(Array.from({ length: 3 }, (_, i) => complete(`Count to ${i + 3}:`, 4)));
    console.log(`woken from zero: ${held.map((h) => h.status).join(', ')}`);
    expect(held.map((h) => h.status)).toEqual([200, 200, 200]);
  }, 360_000);
});
