// Durable batches through SIGKILLs (issue 40, points 1 and 2): OpenAI's official Python client
// uploads a 10,000-line chat JSONL and a 1,000-line embeddings JSONL (a batch has one endpoint, as
// OpenAI's does; a few lines of each name a model that does not exist), creates both batches,
// polls them and downloads their output and error files, while the test kills -9, once each and
// as real processes, the router, the Temporal dev server (restarted on its port from its SQLite
// file) and the control worker. Both batches complete, and every custom_id appears exactly once in
// output plus errors, the unknown-model lines in the error file with the router's reason.
// A dev server of the file's own, one `llmgw worker`, one simulated agent serving `life` (the
// fake engine), one `llmgw router --files-dir`. Runs where the test setup installed the openai venv.
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import {
  eventually,
  inventory,
  runLlmgw,
  spawnControlWorker,
  spawnLlmgw,
  uniqueId,
  usePrivateFleet,
  type LlmgwProcess,
} from '../helpers/fleet.js';
import { findFreePort } from '../../common/ports.js';
import { toolProgram } from '../setup/tools.js';

const PYTHON = toolProgram('openai', 'python');
const nodeId = uniqueId('batcher');
const fleet = usePrivateFleet([nodeId], 'batch-survives');
const dir = mkdtempSync(join(tmpdir(), 'llmgw-batch-survives-'));
const CHAT = 10_000;
const EMBED = 1_000;
/** Lines to a model no route serves: every 1,000th chat line, every 250th embeddings line. */
const unknownChat = (i: number): boolean => i % 1000 === 999;
const unknownEmbed = (i: number): boolean => i % 250 === 249;

let worker: LlmgwProcess;
let router: LlmgwProcess;
let routerPort = 0;
let metricsPort = 0;
const routerUrl = (): string => `http://127.0.0.1:${routerPort}`;
const workerEnv = (): Record<string, string> => ({
  ...fleet.env,
  LLMGW_FILES_DIR: join(dir, 'files'),
  LLMGW_ROUTER_URL: routerUrl(),
  LLMGW_METRICS_ADDR: `127.0.0.1:${metricsPort}`,
});

/** The router, on the same port each time: the worker's LLMGW_ROUTER_URL finds it again. */
async function startRouter(): Promise<LlmgwProcess> {
  const admin = await findFreePort();
  const args = ['router', '--port', String(routerPort), '--host', '127.0.0.1', '--admin-addr', `127.0.0.1:${admin}`];
  const proc = spawnLlmgw([...args, '--files-dir', join(dir, 'files')], fleet.env);
  await proc.waitForOutput(/listening/, 30_000);
  return proc;
}

/** llmgw_batch_lines{outcome="retried"} of the running worker (its count dies with it). */
async function linesRetried(): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
  const m = /^llmgw_batch_lines\{[^}]*outcome="retried"[^}]*\} (\d+)/m.exec(text);
  return m ? Number(m[1]) : 0;
}

/** Lines done (completed + failed) of the batches, as the router answers; undefined while it cannot. */
async function done(ids: string[]): Promise<number | undefined> {
  let sum = 0;
  for (const id of ids) {
    const res = await fetch(`${routerUrl()}/v1/batches/${id}`).catch(() => undefined);
    if (!res?.ok) return undefined;
    const b = (await res.json()) as { request_counts: { completed: number; failed: number } };
    sum += b.request_counts.completed + b.request_counts.failed;
  }
  return sum;
}

/** Waits until `more` lines past `from` are done: the batches move between the kills. */
async function progressed(ids: string[], from: number, more: number, withinMs: number): Promise<number> {
  return eventually(
    `${more} more lines done`,
    async () => {
      const n = await done(ids);
      return n !== undefined && n >= from + more ? n : undefined;
    },
    withinMs,
    250,
  );
}

const chatLine = (i: number): string =>
  JSON.stringify({
    custom_id: `chat-${i}`,
    method: 'POST',
    url: '/v1/chat/completions',
    body: { model: unknownChat(i) ? 'no-such-model' : 'life', messages: [{ role: 'user', content: `line ${i}` }], max_tokens: 2 },
  });
const embedLine = (i: number): string =>
  JSON.stringify({
    custom_id: `embed-${i}`,
    method: 'POST',
    url: '/v1/embeddings',
    body: { model: unknownEmbed(i) ? 'no-such-model' : 'life', input: `line ${i}` },
  });

// Uploads, creates, prints the batch ids, polls through outages (the router or Temporal down for
// seconds: asked again, a minute at most a call), then downloads each batch's files.
const CLIENT = `
import json, sys, time, openai
c = openai.OpenAI(max_retries=0, timeout=30)
def again(call):
    end = time.time() + 60
    while True:
        try:
            return call()
        except (openai.APIConnectionError, openai.APITimeoutError, openai.InternalServerError):
            if time.time() > end: raise
            time.sleep(0.5)
ids = []
for path, endpoint in ((sys.argv[1], '/v1/chat/completions'), (sys.argv[2], '/v1/embeddings')):
    f = c.files.create(file=open(path, 'rb'), purpose='batch')
    ids.append(c.batches.create(input_file_id=f.id, endpoint=endpoint, completion_window='24h').id)
print('BATCHES ' + ' '.join(ids), flush=True)
deadline, final = time.time() + float(sys.argv[4]), {}
while len(final) < len(ids) and time.time() < deadline:
    for i in ids:
        b = again(lambda: c.batches.retrieve(i))
        if b.status in ('completed', 'failed', 'expired', 'cancelled'): final[i] = b
    time.sleep(1)
out = []
for i in ids:
    b = final.get(i) or again(lambda: c.batches.retrieve(i))
    files = {}
    for kind in ('output_file_id', 'error_file_id'):
        if getattr(b, kind):
            files[kind] = f'{sys.argv[3]}/{i}.{kind}.jsonl'
            again(lambda: c.files.content(getattr(b, kind))).write_to_file(files[kind])
    out.append({'batch': b.to_dict(), 'files': files})
print(json.dumps(out))
`;

interface BatchSeen {
  status: string;
  request_counts: { total: number; completed: number; failed: number };
  in_progress_at: number;
  completed_at: number;
}
interface ResultLine {
  custom_id: string;
  response: { status_code: number } | null;
  error: { code: string; message: string } | null;
}
interface ClientRun {
  ids: Promise<string[]>;
  result: Promise<{ batch: BatchSeen; files: Record<string, string> }[]>;
}

function runPythonClient(chatPath: string, embedPath: string, pollS: number): ClientRun {
  const child = spawn(PYTHON, ['-c', CLIENT, chatPath, embedPath, dir, String(pollS)], {
    env: { PATH: process.env.PATH ?? '', OPENAI_BASE_URL: `${routerUrl()}/v1`, OPENAI_API_KEY: 'unused' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
  const ids = new Promise<string[]>((resolve, reject) => {
    child.stdout.on('data', (c: Buffer) => {
      stdout += c.toString();
      const m = /^BATCHES (.+)$/m.exec(stdout);
      if (m) resolve(m[1]!.trim().split(' '));
    });
    child.once('exit', () => reject(new Error(`the Python client printed no batch ids:\n${stderr.slice(-3000)}`)));
  });
  // Bounded: the client's own deadline, plus its downloads.
  const timer = setTimeout(() => child.kill('SIGKILL'), (pollS + 120) * 1000);
  const result = new Promise<ClientRun['result'] extends Promise<infer T> ? T : never>((resolve, reject) =>
    child.once('exit', (code) => {
      clearTimeout(timer);
      if (code !== 0) return reject(new Error(`the Python client exited ${code}:\n${stderr.slice(-3000)}`));
      resolve(JSON.parse(stdout.trim().split('\n').pop() ?? ''));
    }),
  );
  return { ids, result };
}

const jsonl = (path: string | undefined): ResultLine[] =>
  path === undefined
    ? []
    : readFileSync(path, 'utf8')
        .split('\n')
        .filter((l) => l !== '')
        .map((l) => JSON.parse(l) as ResultLine);

beforeAll(async () => {
  routerPort = await findFreePort();
  metricsPort = await findFreePort();
  worker = await spawnControlWorker(workerEnv());
  await fleet.agent(nodeId, { gpus: inventory('lifex8.yaml') });
  router = await startRouter();
  const name = uniqueId('batched');
  const deployed = await runLlmgw(
    ['deploy', 'life', '--name', name, '--profile', 'one-gpu', '--replicas', '1', '--wait', '--timeout', '60'],
    fleet.env,
  );
  expect(deployed.code, deployed.output).toBe(0);
  // The router has the route: a line sent now is served, not refused.
  await eventually(
    'the route with the router',
    async () => {
      const res = await fetch(`${routerUrl()}/v1/embeddings`, { method: 'POST', body: JSON.stringify({ model: 'life', input: 'x' }) });
      return res.status === 200 ? true : undefined;
    },
    30_000,
  );
}, 120_000);

describe.skipIf(!existsSync(PYTHON))('a batch through kill -9 of the router, the Temporal server and the control worker', () => {
  it('completes, every custom_id exactly once in output plus errors, the unknown-model lines failed with their reason', async () => {
    const chatPath = join(dir, 'chat.jsonl');
    const embedPath = join(dir, 'embed.jsonl');
    writeFileSync(chatPath, `${Array.from({ length: CHAT }, (_, i) => chatLine(i)).join('\n')}\n`);
    writeFileSync(embedPath, `${Array.from({ length: EMBED }, (_, i) => embedLine(i)).join('\n')}\n`);
    const started = Date.now();
    const client = runPythonClient(chatPath, embedPath, 240);
    const ids = await client.ids;
    const steps: string[] = [];
    /** Logs a kill and times the restart that follows it. */
    const killed = async (what: string, n: number, restart: () => Promise<void>): Promise<void> => {
      const t = Date.now();
      await restart();
      steps.push(`${what} killed at ${((t - started) / 1000).toFixed(1)} s (${n} lines done), back in ${Date.now() - t} ms`);
    };

    let n = await progressed(ids, 0, 1, 60_000);
    await router.kill9();
    await killed('router', n, async () => void (router = await startRouter()));

    n = await progressed(ids, n, 500, 60_000);
    const server = fleet.temporal.server;
    process.kill(-server.pid, 'SIGKILL');
    await server.exited;
    await killed('Temporal', n, () => fleet.temporal.restart());

    n = await progressed(ids, n, 500, 60_000);
    // A second into the next chunks: they have sent lines and written nothing yet.
    await new Promise((r) => setTimeout(r, 1000));
    let retried = await linesRetried();
    await worker.kill9();
    await killed('worker', n, async () => void (worker = await spawnControlWorker(workerEnv())));

    const results = await client.result;
    retried += await linesRetried();
    const seconds = ((Date.now() - started) / 1000).toFixed(1);
    const [chat, embed] = results;
    for (const r of results) expect(r.batch.status, JSON.stringify(r.batch)).toBe('completed');
    expect(chat!.batch.request_counts).toEqual({ total: CHAT, completed: CHAT - CHAT / 1000, failed: CHAT / 1000 });
    expect(embed!.batch.request_counts).toEqual({ total: EMBED, completed: EMBED - EMBED / 250, failed: EMBED / 250 });

    for (const [r, total, prefix, unknown] of [
      [chat!, CHAT, 'chat', unknownChat],
      [embed!, EMBED, 'embed', unknownEmbed],
    ] as const) {
      const output = jsonl(r.files.output_file_id);
      const errors = jsonl(r.files.error_file_id);
      const seen = [...output, ...errors].map((l) => l.custom_id);
      // Exactly once: no id twice, none missing.
      expect(new Set(seen).size).toBe(seen.length);
      expect(seen.sort()).toEqual(Array.from({ length: total }, (_, i) => `${prefix}-${i}`).sort());
      for (const l of output) expect(l.response?.status_code).toBe(200);
      expect(errors.map((l) => l.custom_id).sort()).toEqual(
        Array.from({ length: total }, (_, i) => i)
          .filter(unknown)
          .map((i) => `${prefix}-${i}`)
          .sort(),
      );
      for (const l of errors) expect(l).toMatchObject({ error: { code: 'model_not_found' }, response: { status_code: 404 } });
    }

    // Chunks a kill cut short ran again (a second attempt) yet wrote once.
    let chunksRetried = 0;
    await fleet.temporal.withClient(async (c) => {
      for (const id of ids) {
        for await (const run of c.workflow.list({ query: `WorkflowId = '${id}'` })) {
          const history = await c.workflow.getHandle(id, run.runId).fetchHistory();
          chunksRetried += (history.events ?? []).filter((e) => (e.activityTaskStartedEventAttributes?.attempt ?? 1) > 1).length;
        }
      }
    }, 5_000);
    const took = (b: BatchSeen): number => b.completed_at - b.in_progress_at;
    console.log(
      `batches: ${steps.join('; ')}; both completed ${seconds} s after the client started ` +
        `(chat ${took(chat!.batch)} s, embeddings ${took(embed!.batch)} s in progress); ` +
        `${chunksRetried} chunk attempt(s) retried, ${retried} line(s) sent again; ${CHAT + EMBED} custom_ids, each once`,
    );
    expect(chunksRetried).toBeGreaterThan(0);
  }, 300_000);
});
