// The agent's admin API: only the agent's user gets in (a 0600 Unix socket, or a token on TCP),
// and a follow costs the agent a bounded amount whatever the engine writes or the client reads.
import { appendFileSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import { afterEach, describe, expect, it } from 'vitest';
import { adminToken } from '../../agent/admin/auth.js';
import { connectAdmin } from '../../agent/admin/client.js';
import { FOLLOW_LIMITS } from '../../agent/admin/follow.js';
import { startAdminServer, type AdminServer } from '../../agent/admin/server.js';
import { tailLines } from '../../agent/supervisor/logs/logs.js';
import { RegisterSchema } from '../../proto/gen/llmgw/v1/register_pb.js';

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function serve(address: (dir: string) => string, withToken: boolean): Promise<{ dir: string; server: AdminServer; token: string }> {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-admin-'));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, 'demo.1.r0.a1.log'), 'first\nsecond\n', { mode: 0o600 });
  const token = adminToken(dir);
  const server = await startAdminServer(
    address(dir),
    { describe: async () => create(RegisterSchema, { nodeId: 'n1' }), logFile: (id) => join(dir, `${id}.log`), tailLines },
    withToken ? token : undefined,
  );
  cleanups.push(() => server.close());
  return { dir, server, token };
}

function client(address: string, token?: string): ReturnType<typeof connectAdmin> {
  const admin = connectAdmin(address, token === undefined ? {} : { token });
  cleanups.push(() => admin.close());
  return admin;
}

function errorOf(promise: Promise<unknown>): Promise<{ code?: number; details?: string }> {
  return promise.then(
    () => ({}),
    (error: { code?: number; details?: string }) => error,
  );
}

describe('the admin API', () => {
  it('listens on a 0600 Unix socket in the state dir, where the agent user needs no token', async () => {
    const { server, dir } = await serve((d) => `unix:${join(d, 'admin.sock')}`, false);
    expect(server.address).toBe(`unix:${join(dir, 'admin.sock')}`);
    expect(statSync(join(dir, 'admin.sock')).mode & 0o777).toBe(0o600);
    expect((await client(server.address).describe()).register?.nodeId).toBe('n1');
  });

  it('on TCP, answers only calls carrying the token from the 0600 admin.token', async () => {
    const { server, dir, token } = await serve(() => '127.0.0.1:0', true);
    expect(statSync(join(dir, 'admin.token')).mode & 0o777).toBe(0o600);
    expect(token).toMatch(/^[0-9a-f]{64}$/);
    // 16: UNAUTHENTICATED.
    expect(await errorOf(client(server.address).describe())).toMatchObject({ code: 16 });
    expect(await errorOf(client(server.address, 'f'.repeat(64)).describe())).toMatchObject({ code: 16 });
    const tail = client(server.address).tail('demo.1.r0.a1', 10, false);
    const refused = await new Promise<{ code?: number }>((resolve) => tail.on('error', resolve));
    expect(refused.code).toBe(16);
    expect((await client(server.address, token).describe()).register?.nodeId).toBe('n1');
    await expect(
      startAdminServer('127.0.0.1:0', { describe: async () => create(RegisterSchema, {}), logFile: () => '', tailLines }),
    ).rejects.toThrow(/a TCP listener needs a token/);
  });

  it('cuts long lines, bounds concurrent follows, and skips what a follow could not keep up with, saying so', async () => {
    const { server, dir } = await serve((d) => `unix:${join(d, 'admin.sock')}`, false);
    const file = join(dir, 'demo.1.r0.a1.log');
    appendFileSync(file, `${'x'.repeat(30_000)}\n`);
    const first = await new Promise<string[]>((resolve, reject) => {
      const stream = client(server.address).tail('demo.1.r0.a1', 3, false);
      stream.on('data', (chunk: { lines: string[] }) => resolve(chunk.lines));
      stream.on('error', reject);
    });
    expect(first.at(-1)?.length).toBeLessThan(FOLLOW_LIMITS.maxLineChars + 50);
    expect(first.at(-1)).toMatch(/… \[\d+ characters cut\]$/);

    const admin = client(server.address);
    const follows = Array.from({ length: FOLLOW_LIMITS.maxFollows }, () => admin.tail('demo.1.r0.a1', 1, true));
    const received: string[] = [];
    follows[0]!.on('data', (chunk: { lines: string[] }) => received.push(...chunk.lines));
    for (const f of follows.slice(1)) f.on('data', () => undefined);
    for (const f of follows) f.on('error', () => undefined);
    await new Promise((r) => setTimeout(r, 300));
    const extra = admin.tail('demo.1.r0.a1', 1, true);
    const exhausted = await new Promise<{ code?: number; details?: string }>((resolve) => extra.on('error', resolve));
    expect(exhausted.code).toBe(8); // RESOURCE_EXHAUSTED
    expect(exhausted.details).toMatch(/at most 8/);

    appendFileSync(file, 'y'.repeat(FOLLOW_LIMITS.maxLagBytes + 1024));
    appendFileSync(file, '\nafter\n');
    for (let i = 0; i < 40 && !received.some((l) => l.startsWith('---')); i++) await new Promise((r) => setTimeout(r, 100));
    expect(received.find((l) => l.startsWith('---'))).toMatch(/^--- \d+ bytes skipped: the log grew faster than a follow may read/);

    // A closed follow frees its place.
    follows[1]!.cancel();
    await new Promise((r) => setTimeout(r, 300));
    const again = admin.tail('demo.1.r0.a1', 1, true);
    const ok = await new Promise<boolean>((resolve) => {
      again.on('data', () => resolve(true));
      again.on('error', () => resolve(false));
    });
    expect(ok).toBe(true);
    for (const f of [...follows, again]) f.cancel();
  });
});
