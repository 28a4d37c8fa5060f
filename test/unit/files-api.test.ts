// The Files API (purpose batch) on a real router over real HTTP, driven by the official `openai`
// client: upload a 10,000-line JSONL, retrieve, list, download it byte for byte, delete; a wrong
// purpose or a file over the limit refused in OpenAI's shape, nothing kept; one key's files
// invisible to another; a restarted router still serving the directory; the same against a real
// S3-speaking store (moto); and OpenAI's Python client.
import { mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { execFile } from 'node:child_process';
import { createReadStream, existsSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import OpenAI, { toFile } from 'openai';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Readable } from 'node:stream';
import { DirectoryFileStore, putFile, type FileStore } from '../../batches/file-store.js';
import { chunkFileId, indexFileId } from '../../batches/batch-lines.js';
import { writeLineIndex } from '../../batches/line-index.js';
import { writeChunkFile } from '../../activities/batch-files.js';
import { S3FileStore } from '../../batches/s3-file-store.js';
import { s3ClientFromEnv } from '../../common/s3-store.js';
import { ApiKeys } from '../../router/http/auth.js';
import { parseRouterFlags } from '../../router/flags.js';
import { StaticRouteSource } from '../../router/routes/table.js';
import { startRouter, type Router, type RouterOptions } from '../../router/http/server.js';
import { motoMissing, startMotoServer, type MotoServer } from '../helpers/moto-server.js';
import { toolProgram } from '../setup/tools.js';

const routers: Router[] = [];
const dirs: string[] = [];
afterEach(async () => {
  await Promise.all(routers.splice(0).map((r) => r.close(0)));
  await Promise.all(dirs.splice(0).map((d) => rm(d, { recursive: true, force: true })));
});

async function tempDir(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'llmgw-files-'));
  dirs.push(dir);
  return dir;
}

async function router(options: Partial<RouterOptions> = {}): Promise<string> {
  const r = await startRouter({ source: new StaticRouteSource([]), port: 0, host: '127.0.0.1', log: () => undefined, ...options });
  routers.push(r);
  return `http://127.0.0.1:${r.port}`;
}

function client(base: string, apiKey = 'none'): OpenAI {
  return new OpenAI({ apiKey, baseURL: `${base}/v1`, maxRetries: 0 });
}

/** A batch input as a team writes it: one request a line, 2.7 MB for 10,000 lines. */
function batchInput(lines: number): string {
  let text = '';
  for (let i = 0; i < lines; i++) {
    const body = { model: 'chat', max_tokens: 16, messages: [{ role: 'user', content: `question ${i}: ${'x'.repeat(i % 200)}` }] };
    text += `${JSON.stringify({ custom_id: `line-${i}`, method: 'POST', url: '/v1/chat/completions', body })}\n`;
  }
  return text;
}

async function until(check: () => Promise<boolean>, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function downloaded(openai: OpenAI, id: string): Promise<Buffer> {
  return Buffer.from(await (await openai.files.content(id)).arrayBuffer());
}

/** The error an SDK call was answered with (its status and OpenAI error body). */
async function refusal(call: Promise<unknown>): Promise<InstanceType<typeof OpenAI.APIError>> {
  const err = await call.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(OpenAI.APIError);
  return err as InstanceType<typeof OpenAI.APIError>;
}

/** Upload, retrieve, list, download byte for byte, delete: what a batch client does with its input. */
async function roundTrip(base: string, dir: string): Promise<void> {
  const openai = client(base);
  const text = batchInput(10_000);
  const path = join(dir, 'requests.jsonl');
  await writeFile(path, text);
  const created = await openai.files.create({ file: createReadStream(path), purpose: 'batch' });
  expect(created).toMatchObject({
    object: 'file',
    bytes: Buffer.byteLength(text),
    filename: 'requests.jsonl',
    purpose: 'batch',
    status: 'processed',
  });
  expect(created.id).toMatch(/^file-[0-9a-f]{24}$/);
  expect(Math.abs(created.created_at - Date.now() / 1000)).toBeLessThan(60);

  expect(await openai.files.retrieve(created.id)).toEqual(created);
  const listed = await openai.files.list({ purpose: 'batch' });
  expect(listed.data.map((f) => f.id)).toEqual([created.id]);
  expect((await openai.files.list({ purpose: 'assistants' })).data).toEqual([]);
  expect((await downloaded(openai, created.id)).equals(Buffer.from(text))).toBe(true);

  expect(await openai.files.delete(created.id)).toEqual({ id: created.id, object: 'file', deleted: true });
  expect((await refusal(openai.files.retrieve(created.id))).status).toBe(404);
  expect((await openai.files.list()).data).toEqual([]);
}

describe('the Files API on a directory', () => {
  it('takes a 10,000-line JSONL from the official client, lists, serves byte for byte and deletes it', async () => {
    const dir = await tempDir();
    const base = await router({ files: { store: await DirectoryFileStore.open(join(dir, 'files')) } });
    await roundTrip(base, dir);
  });

  it("refuses a purpose other than batch with OpenAI's 400, naming the one allowed, and keeps nothing", async () => {
    const dir = await tempDir();
    const base = await router({ files: { store: await DirectoryFileStore.open(dir) } });
    const openai = client(base);
    const err = await refusal(openai.files.create({ file: await toFile(Buffer.from('{}\n'), 'a.jsonl'), purpose: 'fine-tune' }));
    expect(err.status).toBe(400);
    expect(err.error).toMatchObject({ type: 'invalid_request_error', param: 'purpose', code: 'invalid_value' });
    expect(err.message).toContain(`["batch"]`);
    expect((await openai.files.list()).data).toEqual([]);
    expect(await readdir(dir)).toEqual([]);
  });

  it('refuses a file over the limit with 413 once its body is read, and keeps nothing of it', async () => {
    const dir = await tempDir();
    const base = await router({ files: { store: await DirectoryFileStore.open(dir), maxBytes: 10_000 } });
    const openai = client(base);
    const err = await refusal(openai.files.create({ file: await toFile(Buffer.alloc(50_000, 'a'), 'big.jsonl'), purpose: 'batch' }));
    expect(err.status).toBe(413);
    expect(err.error).toMatchObject({ code: 'file_too_large' });
    expect(err.message).toContain('10000 bytes');
    expect(await readdir(dir)).toEqual([]);
    // The connection is still good for the next upload.
    const small = await openai.files.create({ file: await toFile(Buffer.from('{}\n'), 'ok.jsonl'), purpose: 'batch' });
    expect(small.bytes).toBe(3);
  });

  it('stays up and keeps nothing when a client leaves in the middle of an upload', async () => {
    const dir = await tempDir();
    const base = await router({ files: { store: await DirectoryFileStore.open(dir) } });
    const boundary = 'cut-short';
    const upload = request(`${base}/v1/files`, {
      method: 'POST',
      headers: { 'content-type': `multipart/form-data; boundary=${boundary}`, 'content-length': 10_000_000 },
    });
    upload.on('error', () => undefined);
    upload.write(`--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="in.jsonl"\r\n\r\n`);
    upload.write(Buffer.alloc(1_000_000, 'a'));
    await until(async () => (await readdir(dir)).some((name) => name.startsWith('.staging-')));
    upload.destroy();
    await until(async () => (await readdir(dir)).length === 0);
    expect((await client(base).files.list()).data).toEqual([]);
  });

  it("shows a batch's chunk files and line index to no one, with keys or without", async () => {
    const dir = await tempDir();
    const store = await DirectoryFileStore.open(dir);
    const batchId = `batch_${'ab'.repeat(12)}`;
    await writeChunkFile(store, batchId, { index: 0, start: 0, end: 1 }, []);
    await writeLineIndex(store, batchId, [{ request: 0, line: 1, byte: 0 }]);
    for (const id of [chunkFileId(batchId, 0), indexFileId(batchId)]) {
      expect(await store.stat(id)).toBeDefined();
      for (const apiKeys of [undefined, new ApiKeys([{ key: 'key-of-team-a', id: 'team-a' }])]) {
        const c = client(await router({ files: { store }, ...(apiKeys ? { apiKeys } : {}) }), 'key-of-team-a');
        expect((await c.files.list()).data).toEqual([]);
        expect((await refusal(c.files.content(id))).status).toBe(404);
        expect((await refusal(c.files.delete(id))).status).toBe(404);
      }
    }
  });

  it("keeps a key's files from every other key, answered as if they did not exist", async () => {
    const dir = await tempDir();
    const apiKeys = new ApiKeys([
      { key: 'key-of-team-a', id: 'team-a' },
      { key: 'key-of-team-b', id: 'team-b' },
    ]);
    const base = await router({ apiKeys, files: { store: await DirectoryFileStore.open(dir) } });
    const a = client(base, 'key-of-team-a');
    const b = client(base, 'key-of-team-b');
    const file = await a.files.create({ file: await toFile(Buffer.from('{"custom_id":"1"}\n'), 'a.jsonl'), purpose: 'batch' });

    expect((await refusal(b.files.retrieve(file.id))).status).toBe(404);
    expect((await refusal(b.files.content(file.id))).status).toBe(404);
    expect((await refusal(b.files.delete(file.id))).status).toBe(404);
    expect((await b.files.list()).data).toEqual([]);
    expect((await refusal(client(base, 'not-a-key').files.list())).status).toBe(401);
    expect((await fetch(`${base}/v1/files/${file.id}/content`)).status).toBe(401);

    expect((await a.files.list()).data.map((f) => f.id)).toEqual([file.id]);
    expect((await downloaded(a, file.id)).toString()).toBe('{"custom_id":"1"}\n');
  });

  it('still lists and serves a file after the router is restarted on the same directory', async () => {
    const dir = await tempDir();
    const first = await router({ files: { store: await DirectoryFileStore.open(dir) } });
    const file = await client(first).files.create({ file: await toFile(Buffer.from('{"a":1}\n{"a":2}\n'), 'in.jsonl'), purpose: 'batch' });
    await routers.pop()?.close(0);

    const again = client(await router({ files: { store: await DirectoryFileStore.open(dir) } }));
    expect((await again.files.list()).data).toEqual([file]);
    expect((await downloaded(again, file.id)).toString()).toBe('{"a":1}\n{"a":2}\n');
  });

  it('pages a listing in the order asked, and names what is wrong with a bad page', async () => {
    const dir = await tempDir();
    const openai = client(await router({ files: { store: await DirectoryFileStore.open(dir) } }));
    const ids: string[] = [];
    for (let i = 0; i < 3; i++)
      ids.push((await openai.files.create({ file: await toFile(Buffer.from(`${i}\n`), `${i}.jsonl`), purpose: 'batch' })).id);
    const asc = (await openai.files.list({ order: 'asc', limit: 10 })).data.map((f) => f.id);
    expect([...asc].sort()).toEqual([...ids].sort());
    const page = await openai.files.list({ order: 'asc', limit: 2 });
    expect(page.data.map((f) => f.id)).toEqual(asc.slice(0, 2));
    expect(page.has_more).toBe(true);
    expect((await openai.files.list({ order: 'asc', after: asc[1] })).data.map((f) => f.id)).toEqual(asc.slice(2));
    expect((await refusal(openai.files.list({ limit: 0 }))).status).toBe(400);
  });

  it('answers /v1/files on a router without a store with a 404 naming the flags to set', async () => {
    const answer = await fetch(`${await router()}/v1/files`);
    expect(answer.status).toBe(404);
    const body = (await answer.json()) as { error: { message: string; code: string } };
    expect(body.error.code).toBe('files_not_configured');
    expect(body.error.message).toContain('--files-dir');
    expect(body.error.message).toContain('--files-s3');
  });
});

const PYTHON_OPENAI = toolProgram('openai', 'python');

// The Python client sends `purpose` before `file` (the Node client after it), through httpx.
describe.skipIf(!existsSync(PYTHON_OPENAI))("OpenAI's Python client", () => {
  it('uploads, reads back byte for byte, is refused a wrong purpose and deletes', async () => {
    const dir = await tempDir();
    const base = await router({ files: { store: await DirectoryFileStore.open(join(dir, 'files')) } });
    const path = join(dir, 'requests.jsonl');
    await writeFile(path, batchInput(1000));
    const code = `
import json, sys, openai
c = openai.OpenAI(max_retries=0)
f = c.files.create(file=open(sys.argv[1], 'rb'), purpose='batch')
same = c.files.content(f.id).read() == open(sys.argv[1], 'rb').read()
listed = [x.id for x in c.files.list(purpose='batch')]
try:
    c.files.create(file=open(sys.argv[1], 'rb'), purpose='fine-tune')
    refused = None
except openai.BadRequestError as e:
    refused = [e.status_code, e.body.get('param')]
deleted = c.files.delete(f.id).deleted
print(json.dumps({'bytes': f.bytes, 'filename': f.filename, 'same': same, 'listed': listed == [f.id], 'refused': refused, 'deleted': deleted}))
`;
    const { stdout } = await promisify(execFile)(PYTHON_OPENAI, ['-c', code, path], {
      env: { PATH: process.env.PATH ?? '', OPENAI_BASE_URL: `${base}/v1`, OPENAI_API_KEY: 'unused' },
      timeout: 60_000,
    });
    expect(JSON.parse(stdout.trim().split('\n').pop() ?? '')).toEqual({
      bytes: Buffer.byteLength(batchInput(1000)),
      filename: 'requests.jsonl',
      same: true,
      listed: true,
      refused: [400, 'purpose'],
      deleted: true,
    });
    expect(await readdir(join(dir, 'files'))).toEqual([]);
  }, 60_000);
});

describe('the files flags', () => {
  const base = { host: '127.0.0.1', staticRoutes: 'demo=http://127.0.0.1:9' };
  it('take one place for files, an s3:// one for S3, and a limit of 200 MB by default', () => {
    expect(parseRouterFlags({ ...base, filesDir: '/var/lib/llmgw/files' }, {}).flags).toMatchObject({
      filesDir: '/var/lib/llmgw/files',
      filesMaxBytes: 200 * 1024 * 1024,
    });
    expect(() => parseRouterFlags({ ...base, filesDir: '/d', filesS3: 's3://b/p' }, {})).toThrow(/--files-dir and --files-s3/);
    expect(() => parseRouterFlags({ ...base, filesS3: 'b/p' }, {})).toThrow(/--files-s3: must be s3:\/\/BUCKET\/PREFIX/);
  });
});

describe.skipIf(motoMissing() !== undefined)('the Files API on S3', () => {
  let moto: MotoServer;
  beforeAll(async () => {
    moto = await startMotoServer();
    await moto.python(`s3.create_bucket(Bucket='batch-files')\nprint(json.dumps(True))`);
  }, 60_000);
  afterAll(() => moto?.stop());

  it('keeps files in the bucket under the prefix, with the weights’ S3 environment', async () => {
    const dir = await tempDir();
    const store: FileStore = new S3FileStore('s3://batch-files/team/in', s3ClientFromEnv(moto.env(moto.admin)), dir);
    await roundTrip(await router({ files: { store } }), dir);
    const base = await router({ files: { store } });
    const file = await client(base).files.create({ file: await toFile(Buffer.from('{"b":1}\n'), 'b.jsonl'), purpose: 'batch' });
    const keys = await moto.python<string[]>(
      `print(json.dumps(sorted(o['Key'] for o in s3.list_objects_v2(Bucket='batch-files').get('Contents', []))))`,
    );
    expect(keys).toEqual([`team/in/${file.id}`, `team/in/${file.id}.json`]);
    // Nothing is left in the spool folder once the bytes are in the bucket.
    expect((await readdir(dir)).filter((n) => n.startsWith('llmgw-file-'))).toEqual([]);
  }, 60_000);

  it('opens a file at a byte with a ranged GET, and past its end as empty', async () => {
    const store = new S3FileStore('s3://batch-files/ranged', s3ClientFromEnv(moto.env(moto.admin)), await tempDir());
    const meta = await putFile(
      store,
      Readable.from([Buffer.from('0123456789')]),
      { id: 'file-ranged', createdAt: 1, filename: 'r', purpose: 'batch', owner: null },
      100,
    );
    const read = async (from: number) => {
      let text = '';
      for await (const part of (await store.open(meta.id, from))!) text += (part as Buffer).toString();
      return text;
    };
    expect([await read(0), await read(7), await read(9), await read(10), await read(50)]).toEqual(['0123456789', '789', '9', '', '']);
  }, 30_000);

  it('names what to fix at start when the bucket is missing or the key refused', async () => {
    await new S3FileStore('s3://batch-files/team', s3ClientFromEnv(moto.env(moto.admin))).check();
    const missing = new S3FileStore('s3://no-such-bucket/in', s3ClientFromEnv(moto.env(moto.admin)));
    await expect(missing.check()).rejects.toThrow(/--files-s3: s3:\/\/no-such-bucket\/in\/: bucket "no-such-bucket" does not exist/);
    const stranger = moto.env({ AWS_ACCESS_KEY_ID: 'AKIAUNKNOWNKEY000000', AWS_SECRET_ACCESS_KEY: 'not-a-key' });
    await expect(new S3FileStore('s3://batch-files/team', s3ClientFromEnv(stranger)).check(stranger)).rejects.toThrow(
      /refused the credentials of the router/,
    );
  }, 30_000);
});
