// One uid per engine (--engine-uid-range, issue 37): real fake engines started by the real
// supervisor as root. Under the one shared engine user, any engine reads another's
// /proc/PID/environ, key included; with the range each shard runs as a uid of its own, which
// cannot, and keeps that uid across an agent restart while a new shard gets another.
import { spawnSync } from 'node:child_process';
import { accessSync, chmodSync, constants, copyFileSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { parseAgentFlags } from '../../agent/config.js';
import { lookupUser, resolveEngineUids, type EngineUser } from '../../agent/engine-identity.js';
import { readEnviron } from '../../agent/supervisor/processes/proc.js';
import { readAllRecords } from '../../agent/supervisor/spec-store.js';
import { engineHome } from '../../agent/supervisor/start/engine-uid.js';
import { agentHost, BIN, fakeSpec, tempDir, useSupervisorHarness } from '../helpers/supervisor.js';

useSupervisorHarness();

const runningAsRoot = process.getuid?.() === 0;
const nobody = lookupUser('nobody');
const KEY = `engine-key-${Math.random().toString(36).slice(2)}`;

/**
 * A node binary the engine uids may run: this one where every folder above it lets others in,
 * else a copy (CI's Node 24 lives under root's 0700 home, where `nobody` gets EACCES).
 */
function nodeOthersCanRun(): string {
  const othersMayEnter = (path: string): boolean => (statSync(path).mode & 0o001) !== 0;
  let dir = dirname(process.execPath);
  let reachable = othersMayEnter(process.execPath);
  for (; reachable && dir !== dirname(dir); dir = dirname(dir)) reachable = othersMayEnter(dir);
  if (reachable) return process.execPath;
  const home = tempDir();
  chmodSync(home, 0o755);
  const copy = join(home, 'node');
  copyFileSync(process.execPath, copy);
  chmodSync(copy, 0o755);
  accessSync(copy, constants.X_OK);
  return copy;
}

/** The real, effective, saved and filesystem ids of a process, from its Uid: or Gid: line. */
function ids(pid: number, field: 'Uid' | 'Gid'): number[] {
  const line = new RegExp(`^${field}:\\s+(.*)$`, 'm').exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]!;
  return line.trim().split(/\s+/).map(Number);
}

/** What a process running as uid:gid gets reading another's environment: its text, or the error code. */
function readEnvironAs(uid: number, gid: number, pid: number): string {
  const script = `try { process.stdout.write(require('fs').readFileSync('/proc/${pid}/environ', 'utf8')) } catch (e) { process.stdout.write(e.code) }`;
  const out = spawnSync(nodeForEngines(), ['-e', script], { uid, gid, cwd: '/', env: {}, encoding: 'utf8' });
  if (out.status !== 0) throw new Error(`the reader failed: ${out.stderr}`);
  return out.stdout;
}

function keyFile(): string {
  const file = join(tempDir(), 'engine.key');
  writeFileSync(file, `${KEY}\n`, { mode: 0o600 });
  return file;
}

// A range no account of this host holds, away from other tests' ranges.
function freeUidRange(): { from: number; to: number } {
  const from = 61000 + Math.floor(Math.random() * 900) * 10;
  return resolveEngineUids({ from, to: from + 9 }, nobody, () => {})!;
}

// Each test's temp dirs go after it, a copy with them: one per test.
let enginesNode: string | undefined;
const nodeForEngines = (): string => (enginesNode ??= nodeOthersCanRun());
afterEach(() => {
  enginesNode = undefined;
});

describe.skipIf(!runningAsRoot || !nobody)('one uid per engine', () => {
  const user = nobody as EngineUser;
  const fakeEngine = () => ({ fakeEngineCommand: [nodeForEngines(), BIN, 'fake-engine'] });

  it('under the one shared engine user, an engine reads another engine’s environment, key included', async () => {
    const { node, startAgent } = await agentHost('shared-uid');
    const { sup } = startAgent({ engineUser: user, engineKeyFile: keyFile(), engineContext: fakeEngine() });
    const a = (await sup.start(fakeSpec(node, 'demo.1.r0.a1', [], [0]))).status!.pid;
    const b = (await sup.start(fakeSpec(node, 'demo.2.r0.a1', [], [1]))).status!.pid;
    expect(ids(a, 'Uid')).toEqual([user.uid, user.uid, user.uid, user.uid]);
    expect(ids(b, 'Uid')).toEqual(ids(a, 'Uid'));
    expect(readEnvironAs(user.uid, user.gid, b)).toContain(`VLLM_API_KEY=${KEY}`);
  });

  it('with --engine-uid-range, runs each shard as its own uid, which cannot read another’s environment, and keeps it across a restart', async () => {
    const { node, stateDir, startAgent } = await agentHost('own-uid', 6);
    const range = freeUidRange();
    const options = { engineUser: user, engineUids: range, engineKeyFile: keyFile(), engineContext: fakeEngine() };
    const first = startAgent(options);
    const specA = fakeSpec(node, 'demo.1.r0.a1', [], [0]);
    const specB = fakeSpec(node, 'demo.2.r0.a1', [], [1]);
    const a = (await first.sup.start(specA)).status!.pid;
    const b = (await first.sup.start(specB)).status!.pid;
    await first.sup.waitHealthy(specA.shardId, 20);
    await first.sup.waitHealthy(specB.shardId, 20);

    const uidA = ids(a, 'Uid')[0]!;
    const uidB = ids(b, 'Uid')[0]!;
    expect(ids(a, 'Uid')).toEqual([uidA, uidA, uidA, uidA]);
    expect(ids(b, 'Uid')).toEqual([uidB, uidB, uidB, uidB]);
    expect(uidA).not.toBe(uidB);
    for (const uid of [uidA, uidB]) expect(uid >= range.from && uid <= range.to).toBe(true);
    // The group stays the engine user's: a group-readable weights cache serves them all.
    expect(ids(a, 'Gid')).toEqual([user.gid, user.gid, user.gid, user.gid]);
    expect(ids(b, 'Gid')).toEqual([user.gid, user.gid, user.gid, user.gid]);

    // A's uid reads its own environment (the key is there) but not B's.
    expect(readEnvironAs(uidA, user.gid, a)).toContain(`VLLM_API_KEY=${KEY}`);
    expect(readEnvironAs(uidA, user.gid, b)).toBe('EACCES');

    // HOME is the uid's own, 0700; the records hold the uids.
    const home = engineHome(stateDir, uidA);
    expect(readEnviron(a)?.HOME).toBe(home);
    expect(statSync(home).uid).toBe(uidA);
    expect(statSync(home).mode & 0o777).toBe(0o700);
    const recorded = () => Object.fromEntries(readAllRecords(stateDir).records.map((r) => [r.spec.shardId, r.uid]));
    expect(recorded()).toEqual({ [specA.shardId]: uidA, [specB.shardId]: uidB });

    // The agent dies; the next one adopts both engines with their uids, and a third shard gets a third.
    first.sup.close();
    const second = startAgent(options);
    const { adopted } = await second.sup.recover();
    expect(adopted.map((r) => r.status?.pid).sort()).toEqual([a, b].sort());
    expect(recorded()).toEqual({ [specA.shardId]: uidA, [specB.shardId]: uidB });
    expect((await second.sup.start(specA)).status?.pid).toBe(a);
    const specC = fakeSpec(node, 'demo.3.r0.a1', [], [2]);
    const c = (await second.sup.start(specC)).status!.pid;
    const uidC = ids(c, 'Uid')[0]!;
    expect(ids(c, 'Uid')).toEqual([uidC, uidC, uidC, uidC]);
    expect([uidA, uidB]).not.toContain(uidC);
    expect(recorded()[specC.shardId]).toBe(uidC);
    expect(readEnvironAs(uidC, user.gid, a)).toBe('EACCES');
  });
});

describe('--engine-uid-range', () => {
  it('is START-END with both at least 1000 and START ≤ END', () => {
    expect(parseAgentFlags({ nodeId: 'n', engineUidRange: '61000-61999' }).engineUidRange).toEqual({ from: 61000, to: 61999 });
    expect(() => parseAgentFlags({ nodeId: 'n', engineUidRange: '500-2000' })).toThrow(
      /--engine-uid-range: both ends must be at least 1000/,
    );
    expect(() => parseAgentFlags({ nodeId: 'n', engineUidRange: '62000-61000' })).toThrow(
      /--engine-uid-range: START must not be above END/,
    );
    expect(() => parseAgentFlags({ nodeId: 'n', engineUidRange: '61000' })).toThrow(/--engine-uid-range: expected START-END/);
  });

  it.skipIf(!runningAsRoot)('refuses a range holding an account’s uid, and one with no engine user to take the group from', () => {
    const passwd = join(tempDir(), 'passwd');
    writeFileSync(passwd, 'root:x:0:0::/root:/bin/sh\nalice:x:61005:61005::/home/alice:/bin/sh\n');
    const user: EngineUser = { name: 'nobody', uid: 65534, gid: 65534, home: '/' };
    expect(() => resolveEngineUids({ from: 61000, to: 61009 }, user, () => {}, passwd)).toThrow(/uid 61005 is the account alice's/);
    expect(resolveEngineUids({ from: 61010, to: 61019 }, user, () => {}, passwd)).toEqual({ from: 61010, to: 61019 });
    expect(() => resolveEngineUids({ from: 61010, to: 61019 }, undefined, () => {}, passwd)).toThrow(/give --engine-user/);
  });
});
