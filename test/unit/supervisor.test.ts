// The engine supervisor with real fake-engine processes: specs written before spawning,
// idempotent starts, engines that outlive the agent and are adopted (same pid) by the next
// one, strangers killed, crashes reported with their exit code and log, ports never shared.
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { create, toJsonString } from '@bufbuild/protobuf';
import { ApplicationFailure } from '@temporalio/common';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { isPortFree } from '../../common/ports.js';
import {
  Engine,
  EngineProfileSchema,
  ShardState,
  StartShardSchema,
  StopShardSchema,
  type ShardStatus,
  type StartShard,
} from '../../proto/gen/llmgw/v1/shard_pb.js';
import { enforceLogLimit, tailLines } from '../../agent/supervisor/logs.js';
import { scanMarked } from '../../agent/supervisor/markers.js';
import { isAlive, parseStat, readEnviron, readStat } from '../../agent/supervisor/proc.js';
import { checkStateDirWritable, logPath, readAllRecords, recordPath, writeRecordAtomic } from '../../agent/supervisor/spec-store.js';
import { createSupervisor, type Supervisor, type SupervisorOptions } from '../../agent/supervisor/supervisor.js';
import { parseEnvFile } from '../../agent/host-env.js';

const BIN = resolve(__dirname, '../../bin/llmgw.js');
const FAKE_ENGINE = [process.execPath, BIN, 'fake-engine'];
const RUN = `${process.pid}-${Math.random().toString(36).slice(2, 7)}`;

let dirs: string[] = [];
let supervisors: Supervisor[] = [];
let nodeIds: string[] = [];
let extraPids: number[] = [];
let servers: Server[] = [];

const ROOT = resolve(__dirname, '../..');

beforeAll(() => {
  for (const built of ['dist/fake-engine/main.js', 'dist/agent/supervisor/supervisor.js']) {
    if (!existsSync(resolve(ROOT, built))) throw new Error(`build first: npx tsc -p tsconfig.build.json (${built} is missing)`);
  }
});

afterEach(async () => {
  for (const s of supervisors) s.close();
  const pids = new Set(extraPids);
  for (const node of nodeIds) for (const m of scanMarked(node)) pids.add(m.pid);
  for (const pid of pids) {
    for (const target of [-pid, pid]) {
      try {
        process.kill(target, 'SIGKILL');
      } catch {
        // already gone
      }
    }
  }
  for (const server of servers) await new Promise((r) => server.close(r));
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  dirs = [];
  supervisors = [];
  nodeIds = [];
  extraPids = [];
  servers = [];
});

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-sup-'));
  dirs.push(dir);
  return dir;
}

function nodeId(name: string): string {
  const id = `${name}-${RUN}`;
  nodeIds.push(id);
  return id;
}

/** A small range in 20000-30000 whose ports are free now. */
async function freeRange(size: number): Promise<{ from: number; to: number }> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const from = 20000 + Math.floor(Math.random() * 9900);
    let ok = true;
    for (let p = from; p < from + size && ok; p++) ok = await isPortFree(p, '127.0.0.1');
    if (ok) return { from, to: from + size - 1 };
  }
  throw new Error('no free port range');
}

interface Harness {
  sup: Supervisor;
  logs: string[];
  transitions: ShardStatus[];
}

function supervisor(options: Partial<SupervisorOptions> & Pick<SupervisorOptions, 'nodeId' | 'stateDir' | 'portRange'>): Harness {
  const logs: string[] = [];
  const transitions: ShardStatus[] = [];
  const sup = createSupervisor({
    advertiseAddress: '127.0.0.1',
    engineContext: { fakeEngineCommand: FAKE_ENGINE },
    healthIntervalMs: 200,
    stopGraceSeconds: 5,
    unidentifiedGraceMs: 3000,
    onTransition: (s) => transitions.push(s),
    log: (line) => logs.push(line),
    ...options,
  });
  supervisors.push(sup);
  return { sup, logs, transitions };
}

function fakeSpec(node: string, shardId: string, args: string[], gpus = [2, 3]): StartShard {
  return create(StartShardSchema, {
    replicaId: 'replica/demo/1',
    shardId,
    deployment: 'demo',
    rank: 0,
    nnodes: 1,
    gpuIndices: gpus,
    nodeId: node,
    profile: create(EngineProfileSchema, {
      name: 'fake-1gpu',
      engine: Engine.FAKE,
      modelSource: 'llmgw/fake-demo',
      servedName: 'demo',
      args,
    }),
  });
}

async function waitFor<T>(what: string, fn: () => T | undefined, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = fn();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function rejection(p: Promise<unknown>): Promise<ApplicationFailure> {
  try {
    await p;
  } catch (err) {
    if (err instanceof ApplicationFailure) return err;
    throw err;
  }
  throw new Error('expected a failure');
}

/** A fake engine started by hand, as a stray from nowhere would be. */
function spawnByHand(env: Record<string, string>, port: number): number {
  const child = spawn(process.execPath, [BIN, 'fake-engine', '--port', String(port), '--host', '127.0.0.1'], {
    detached: true,
    stdio: 'ignore',
    env: { PATH: process.env.PATH ?? '', ...env },
  });
  child.unref();
  if (child.pid === undefined) throw new Error('spawn failed');
  extraPids.push(child.pid);
  return child.pid;
}

describe('starting an engine', () => {
  it('records the spec before spawning, gives the engine exactly its GPUs and markers, and is idempotent', async () => {
    const node = nodeId('start');
    const stateDir = tempDir();
    const recordsSeenAtSpawn: unknown[] = [];
    const { sup } = supervisor({
      nodeId: node,
      stateDir,
      portRange: await freeRange(4),
      beforeSpawn: ({ recordFile }) => {
        recordsSeenAtSpawn.push(JSON.parse(readFileSync(recordFile, 'utf8')).processes);
      },
    });
    const spec = fakeSpec(node, 'demo.1.r0.a1', ['--load-time', '1']);

    const startedAt = Date.now();
    const first = await sup.start(spec);
    expect(recordsSeenAtSpawn).toEqual([[]]);
    const pid = first.status?.pid ?? 0;
    expect(pid).toBeGreaterThan(1);
    expect(first.status?.state).toBe(ShardState.LOADING);
    const recorded = JSON.parse(readFileSync(recordPath(stateDir, spec.shardId), 'utf8'));
    expect(recorded.processes).toEqual([{ role: 'engine', pid, startTicks: first.startTicks, pgid: pid }]);

    const env = readEnviron(pid);
    expect(env?.CUDA_VISIBLE_DEVICES).toBe('2,3');
    expect(env?.LLMGW_NODE_ID).toBe(node);
    expect(env?.LLMGW_SHARD_ID).toBe('demo.1.r0.a1');
    expect(env?.LLMGW_REPLICA_ID).toBe('replica/demo/1');

    const ready = await sup.waitHealthy(spec.shardId, 20);
    expect(ready.state).toBe(ShardState.READY);
    expect(ready.endpoint).toBe(`127.0.0.1:${first.status?.httpPort}`);
    expect(Date.now() - startedAt).toBeGreaterThanOrEqual(1000);

    const again = await sup.start(spec);
    expect(again.status?.pid).toBe(pid);
    expect(scanMarked(node).map((m) => m.pid)).toEqual([pid]);

    const conflict = await rejection(sup.start(fakeSpec(node, 'demo.1.r0.a1', ['--load-time', '1'], [4])));
    expect(conflict.type).toBe('SpecConflict');
    expect(conflict.message).toContain('gpuIndices');
    expect(scanMarked(node).map((m) => m.pid)).toEqual([pid]);
  });

  it('refuses a state dir it cannot write, clearly, and spawns nothing', async () => {
    const node = nodeId('unwritable');
    const file = join(tempDir(), 'not-a-dir');
    writeFileSync(file, 'x');
    const stateDir = join(file, 'state');
    let spawned = 0;
    const { sup } = supervisor({ nodeId: node, stateDir, portRange: await freeRange(2), beforeSpawn: () => void spawned++ });
    const failure = await rejection(sup.start(fakeSpec(node, 'demo.1.r0.a1', [])));
    expect(failure.type).toBe('StateDirUnwritable');
    expect(failure.nonRetryable).toBe(true);
    expect(failure.message).toContain(stateDir);
    expect(failure.message).toMatch(/ENOTDIR|not a directory/);
    expect(spawned).toBe(0);
    expect(scanMarked(node)).toEqual([]);
  });
});

describe('an agent restart', () => {
  it('adopts an engine a previous agent left running: same pid, Ready, stoppable', async () => {
    const node = nodeId('adopt');
    const stateDir = tempDir();
    const portRange = await freeRange(4);
    const a = supervisor({ nodeId: node, stateDir, portRange });
    const spec = fakeSpec(node, 'demo.1.r0.a1', []);
    const started = await a.sup.start(spec);
    const pid = started.status?.pid ?? 0;
    await a.sup.waitHealthy(spec.shardId, 20);
    // The agent dies; its engine does not.
    a.sup.close();

    const b = supervisor({ nodeId: node, stateDir, portRange });
    const recovered = await b.sup.recover();
    expect(recovered.unidentified).toEqual([]);
    expect(recovered.exited).toEqual([]);
    expect(recovered.adopted.map((r) => [r.status?.pid, r.adopted, r.startTicks])).toEqual([[pid, true, started.startTicks]]);
    const ready = await b.sup.waitHealthy(spec.shardId, 10);
    expect(ready.pid).toBe(pid);
    expect(b.transitions.map((t) => t.state)).toEqual([ShardState.READY]);
    expect(readFileSync(logPath(stateDir, spec.shardId), 'utf8')).toContain(`adopted this engine (pid ${pid})`);

    const stopped = await b.sup.stop(create(StopShardSchema, { shardId: spec.shardId, reason: 'test' }));
    expect(stopped.wasRunning).toBe(true);
    expect(isAlive(pid)).toBe(false);
    expect(existsSync(recordPath(stateDir, spec.shardId))).toBe(false);
    expect(b.sup.list()).toEqual([]);
    const again = await b.sup.stop(create(StopShardSchema, { shardId: spec.shardId }));
    expect(again.wasRunning).toBe(false);
  });

  it('survives kill -9 of the agent: the engine keeps serving and the next agent adopts it', async () => {
    const node = nodeId('kill9');
    const stateDir = tempDir();
    const portRange = await freeRange(4);
    const spec = fakeSpec(node, 'demo.7.r0.a1', []);
    // A separate agent process (the compiled supervisor), so that it can really be SIGKILLed.
    const agentScript = `
      const { fromJsonString } = require('@bufbuild/protobuf');
      const { StartShardSchema } = require('./dist/proto/gen/llmgw/v1/shard_pb.js');
      const { createSupervisor } = require('./dist/agent/supervisor/supervisor.js');
      const [stateDir, node, from, to, specJson, ...fake] = process.argv.slice(1);
      const sup = createSupervisor({ nodeId: node, stateDir, portRange: { from: +from, to: +to }, advertiseAddress: '127.0.0.1',
        engineContext: { fakeEngineCommand: fake }, healthIntervalMs: 200 });
      const spec = fromJsonString(StartShardSchema, specJson);
      sup.start(spec).then((r) => sup.waitHealthy(spec.shardId, 20).then(() => console.log('READY ' + r.status.pid)));
      setInterval(() => {}, 1000);`;
    const agent = spawn(
      process.execPath,
      [
        '-e',
        agentScript,
        stateDir,
        node,
        String(portRange.from),
        String(portRange.to),
        toJsonString(StartShardSchema, spec),
        ...FAKE_ENGINE,
      ],
      { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] },
    );
    if (agent.pid !== undefined) extraPids.push(agent.pid);
    const pid = await new Promise<number>((resolvePid, reject) => {
      let out = '';
      agent.stdout?.on('data', (chunk: Buffer) => {
        out += chunk.toString();
        const m = /READY (\d+)/.exec(out);
        if (m?.[1]) resolvePid(Number(m[1]));
      });
      agent.once('exit', (code) => reject(new Error(`the agent process exited (${code}) before its engine was ready`)));
    });
    agent.kill('SIGKILL');
    await new Promise((r) => agent.once('exit', r));

    const port = JSON.parse(readFileSync(recordPath(stateDir, spec.shardId), 'utf8')).httpPort as number;
    const health = await fetch(`http://127.0.0.1:${port}/health`);
    expect(health.status).toBe(200);

    const b = supervisor({ nodeId: node, stateDir, portRange });
    const { adopted, unidentified } = await b.sup.recover();
    expect(unidentified).toEqual([]);
    expect(adopted.map((r) => r.status?.pid)).toEqual([pid]);
    expect((await b.sup.waitHealthy(spec.shardId, 10)).pid).toBe(pid);
    // Started again by a retried activity: still the same engine, nothing new.
    expect((await b.sup.start(spec)).status?.pid).toBe(pid);
    expect(scanMarked(node).map((m) => m.pid)).toEqual([pid]);
  });

  it('finds by its markers an engine spawned just before the previous agent died, and records its pid', async () => {
    const node = nodeId('nopid');
    const stateDir = tempDir();
    const portRange = await freeRange(4);
    const orphan = fakeSpec(node, 'demo.8.r0.a1', []);
    const never = fakeSpec(node, 'demo.9.r0.a1', []);
    const launch = { roles: ['engine' as const], servesHttp: true, healthPath: '/health' };
    checkStateDirWritable(stateDir);
    for (const spec of [orphan, never]) {
      writeRecordAtomic(stateDir, {
        version: 1,
        spec,
        httpPort: portRange.from,
        launch,
        processes: [],
        startedAt: new Date().toISOString(),
      });
    }
    const pid = spawnByHand({ LLMGW_NODE_ID: node, LLMGW_SHARD_ID: orphan.shardId, LLMGW_REPLICA_ID: orphan.replicaId }, portRange.from);
    await waitFor('the orphaned engine', () => readEnviron(pid));

    const b = supervisor({ nodeId: node, stateDir, portRange });
    const { adopted, exited, unidentified } = await b.sup.recover();
    expect(unidentified).toEqual([]);
    expect(exited).toEqual([]);
    expect(adopted.map((r) => r.status?.pid)).toEqual([pid]);
    const records = readAllRecords(stateDir).records;
    expect(records.find((r) => r.spec.shardId === orphan.shardId)?.processes.map((p) => p.pid)).toEqual([pid]);
    expect(b.sup.status(never.shardId)?.state).toBe(ShardState.PENDING);
    await b.sup.waitHealthy(orphan.shardId, 10);

    // The spec that never got its engine is started by the retried startShard.
    const started = await b.sup.start(never);
    expect(started.status?.pid).not.toBe(pid);
    await b.sup.waitHealthy(never.shardId, 10);
  });

  it('reports an engine that died while the agent was down as Failed, until it is stopped', async () => {
    const node = nodeId('diedwhiledown');
    const stateDir = tempDir();
    const portRange = await freeRange(4);
    const a = supervisor({ nodeId: node, stateDir, portRange });
    const spec = fakeSpec(node, 'demo.10.r0.a1', []);
    const pid = (await a.sup.start(spec)).status?.pid ?? 0;
    a.sup.close();
    process.kill(-pid, 'SIGKILL');
    await waitFor('the engine to die', () => (isAlive(pid) ? undefined : true));

    const b = supervisor({ nodeId: node, stateDir, portRange });
    const { adopted, exited } = await b.sup.recover();
    expect(adopted).toEqual([]);
    expect(exited.map((r) => [r.status?.pid, r.status?.state])).toEqual([[pid, ShardState.FAILED]]);
    expect(exited[0]?.status?.message).toContain('engine exited while the agent was down');
    expect(exited[0]?.status?.lastLogLines.join('\n')).toContain('starting the engine of shard demo.10.r0.a1');
    expect(existsSync(recordPath(stateDir, spec.shardId))).toBe(true);
    const stopped = await b.sup.stop(create(StopShardSchema, { shardId: spec.shardId }));
    expect(stopped.wasRunning).toBe(false);
    expect(existsSync(recordPath(stateDir, spec.shardId))).toBe(false);
  });

  it('kills what no readable spec describes, and leaves other agents’ engines alone', async () => {
    const node = nodeId('strangers');
    const other = nodeId('other');
    const stateDir = tempDir();
    const portRange = await freeRange(6);
    const a = supervisor({ nodeId: node, stateDir, portRange });
    const corrupted = await a.sup.start(fakeSpec(node, 'demo.2.r0.a1', []));
    const corruptedPid = corrupted.status?.pid ?? 0;
    a.sup.close();
    writeFileSync(recordPath(stateDir, 'demo.2.r0.a1'), '{"version": 1, "spec": {"shardId": "demo.2');

    const ghostPid = spawnByHand({ LLMGW_NODE_ID: node, LLMGW_SHARD_ID: 'ghost' }, portRange.to);
    const othersPid = spawnByHand({ LLMGW_NODE_ID: other, LLMGW_SHARD_ID: 'theirs' }, portRange.to - 1);
    await waitFor('the hand-started engines', () => (readEnviron(ghostPid) && readEnviron(othersPid) ? true : undefined));

    const b = supervisor({ nodeId: node, stateDir, portRange });
    const { unidentified, adopted } = await b.sup.recover();
    expect(adopted).toEqual([]);
    expect(unidentified.map((u) => [u.pid, u.killed]).sort()).toEqual(
      [
        [corruptedPid, true],
        [ghostPid, true],
      ].sort(),
    );
    expect(unidentified.find((u) => u.pid === corruptedPid)?.gpuIndices).toEqual([2, 3]);
    expect(isAlive(ghostPid)).toBe(false);
    expect(isAlive(corruptedPid)).toBe(false);
    expect(b.logs).toContainEqual(
      expect.stringMatching(new RegExp(`^killed pid ${ghostPid} \\(LLMGW_SHARD_ID=ghost\\): no spec describes it`)),
    );
    expect(b.logs).toContainEqual(
      expect.stringMatching(
        new RegExp(
          `^killed pid ${corruptedPid} \\(LLMGW_SHARD_ID=demo\\.2\\.r0\\.a1\\): no readable spec describes it \\(spec file corrupted: `,
        ),
      ),
    );
    expect(existsSync(recordPath(stateDir, 'demo.2.r0.a1'))).toBe(false);
    expect(existsSync(`${recordPath(stateDir, 'demo.2.r0.a1')}.corrupt`)).toBe(true);

    expect(isAlive(othersPid)).toBe(true);
    const refused = await b.sup.kill([othersPid], 'test');
    expect(refused.refused).toEqual([othersPid]);
    expect(isAlive(othersPid)).toBe(true);
  });
});

describe('processes on our GPUs', () => {
  const sleeper = (env: Record<string, string>) => {
    const child = spawn('sleep', ['30'], { detached: true, stdio: 'ignore', env: { PATH: process.env.PATH ?? '', ...env } });
    child.unref();
    if (child.pid === undefined) throw new Error('spawn failed');
    extraPids.push(child.pid);
    return child.pid;
  };
  const onGpu1 = (pids: number[]) => pids.map((pid) => ({ pid, gpuIndices: [1], usedMemoryMib: 512 }));

  it('reports a GPU process it did not start and leaves it running, by default; never kills another agent’s or our own', async () => {
    const node = nodeId('gpus');
    const other = nodeId('gpus-other');
    const stray = sleeper({});
    const theirs = sleeper({ LLMGW_NODE_ID: other, LLMGW_SHARD_ID: 'x' });
    await waitFor('the sleepers', () => (readEnviron(stray) && readEnviron(theirs) ? true : undefined));
    const { sup, logs } = supervisor({ nodeId: node, stateDir: tempDir(), portRange: await freeRange(4) });
    const started = await sup.start(fakeSpec(node, 'demo.13.r0.a1', []));
    const ours = started.status?.pid ?? 0;

    const found = await sup.survey(onGpu1([ours, stray, theirs]));
    expect(found.unidentified).toEqual([]);
    expect(found.foreign.map((f) => [f.pid, f.killed, f.command, f.gpuIndices, f.usedMemoryMib])).toEqual([
      [stray, false, 'sleep 30', [1], 512],
      [theirs, false, 'sleep 30', [1], 512],
    ]);
    expect(found.foreign[0]?.note).toMatch(/not started by llmgw: reported and left running; GPU 1 withheld from placement/);
    expect(found.foreign[1]?.note).toMatch(new RegExp(`an engine of llmgw agent ${other}: left alone`));
    expect([isAlive(stray), isAlive(theirs), isAlive(ours)]).toEqual([true, true, true]);
    expect(logs).toContainEqual(expect.stringContaining(`foreign process pid ${stray} (sleep 30) on GPU(s) 1, 512 MiB`));
    expect(sup.foreignProcesses(onGpu1([stray])).map((f) => f.pid)).toEqual([stray]);
    // Reconciliation cannot make it kill them either: they carry no marker of ours.
    const refused = await sup.kill([ours, theirs, stray], 'test');
    expect(refused).toMatchObject({ refused: [ours, theirs, stray], killed: [] });
  });

  it('kills a foreign GPU process with --foreign-gpu-processes kill, naming it, but never one of another agent', async () => {
    const node = nodeId('gpus-kill');
    const other = nodeId('gpus-kill-other');
    const stray = sleeper({});
    const theirs = sleeper({ LLMGW_NODE_ID: other, LLMGW_SHARD_ID: 'x' });
    await waitFor('the sleepers', () => (readEnviron(stray) && readEnviron(theirs) ? true : undefined));
    const { sup, logs } = supervisor({ nodeId: node, stateDir: tempDir(), portRange: await freeRange(4), foreignGpuProcesses: 'kill' });
    const { foreign } = await sup.recover(onGpu1([stray, theirs]));
    expect(foreign.map((f) => [f.pid, f.killed])).toEqual([
      [stray, true],
      [theirs, false],
    ]);
    expect(isAlive(stray)).toBe(false);
    expect(isAlive(theirs)).toBe(true);
    expect(logs).toContainEqual(expect.stringContaining(`killed foreign process pid ${stray} (sleep 30) on GPU(s) 1`));
  });

  it('kills nothing at all in dry-run, at start or later, and says what act mode would do', async () => {
    const node = nodeId('gpus-dry');
    const stateDir = tempDir();
    const portRange = await freeRange(4);
    const stray = sleeper({});
    const ghost = sleeper({ LLMGW_NODE_ID: node, LLMGW_SHARD_ID: 'ghost' });
    await waitFor('the sleepers', () => (readEnviron(stray) && readEnviron(ghost) ? true : undefined));
    const { sup, logs } = supervisor({ nodeId: node, stateDir, portRange, dryRun: true, foreignGpuProcesses: 'kill' });
    const recovered = await sup.recover(onGpu1([stray]));
    expect(recovered.unidentified.map((u) => [u.pid, u.killed, u.reason])).toEqual([
      [ghost, false, 'no spec describes it (dry run: act mode would kill it)'],
    ]);
    expect(recovered.foreign.map((f) => [f.pid, f.killed])).toEqual([[stray, false]]);
    expect(recovered.foreign[0]?.note).toMatch(/dry run: act mode would kill it/);
    const later = await sup.survey(onGpu1([stray]));
    expect(later.unidentified.map((u) => u.killed)).toEqual([false]);
    expect(await sup.kill([ghost, stray], 'reconciliation')).toMatchObject({ killed: [], refused: [ghost, stray] });
    expect([isAlive(stray), isAlive(ghost)]).toEqual([true, true]);
    expect(logs).toContainEqual(expect.stringContaining(`dry run: would kill pid ${ghost} (LLMGW_SHARD_ID=ghost): no spec describes it`));
  });
});

describe('engine failures', () => {
  it('reports a crash as a Failed transition with the exit code and the last log lines', async () => {
    const node = nodeId('crash');
    const { sup, transitions } = supervisor({ nodeId: node, stateDir: tempDir(), portRange: await freeRange(4) });
    await sup.start(fakeSpec(node, 'demo.3.r0.a1', ['--crash-after', '1']));
    const failed = await waitFor('the crash', () => transitions.find((t) => t.state === ShardState.FAILED));
    expect(failed.exitCode).toBe(3);
    expect(failed.lastLogLines.join('\n')).toContain('--crash-after');
    // Ready first (no load time), then the crash: each once.
    expect(transitions.map((t) => t.state)).toEqual([ShardState.READY, ShardState.FAILED]);
    expect(sup.status('demo.3.r0.a1')?.state).toBe(ShardState.FAILED);
  });

  it('reports an engine whose health fails three times in a row as Failed while its process lives', async () => {
    const node = nodeId('unhealthy');
    const { sup, transitions } = supervisor({ nodeId: node, stateDir: tempDir(), portRange: await freeRange(4) });
    const pid = (await sup.start(fakeSpec(node, 'demo.11.r0.a1', ['--unhealthy-after', '1']))).status?.pid ?? 0;
    const failed = await waitFor('the unhealthy transition', () => transitions.find((t) => t.state === ShardState.FAILED));
    expect(failed.message).toMatch(/^health check failing: GET http:\/\/127\.0\.0\.1:\d+\/health answered 500/);
    expect(failed.exitCode).toBeUndefined();
    expect(isAlive(pid)).toBe(true);
    await new Promise((r) => setTimeout(r, 600));
    // Polls go on, transitions do not repeat.
    expect(transitions.map((t) => t.state)).toEqual([ShardState.READY, ShardState.FAILED]);
  });

  it('rejects waitHealthy with EngineExited and the engine’s last words when it cannot start', async () => {
    const node = nodeId('failstart');
    const { sup } = supervisor({ nodeId: node, stateDir: tempDir(), portRange: await freeRange(4) });
    await sup.start(fakeSpec(node, 'demo.4.r0.a1', ['--fail-start']));
    const failure = await rejection(sup.waitHealthy('demo.4.r0.a1', 20));
    expect(failure.type).toBe('EngineExited');
    expect(failure.nonRetryable).toBe(true);
    expect(failure.message).toContain('exited with code 2');
    expect(failure.message).toContain('--fail-start');
    const details = failure.details?.[0] as { exitCode: number; lastLogLines: string[] };
    expect(details.exitCode).toBe(2);
    expect(details.lastLogLines.join('\n')).toContain('failed to load model');
  });
});

describe('waiting for health', () => {
  it('gives up after the startup timeout without killing the engine, and stops waiting when cancelled', async () => {
    const node = nodeId('slow');
    const { sup } = supervisor({ nodeId: node, stateDir: tempDir(), portRange: await freeRange(4) });
    const pid = (await sup.start(fakeSpec(node, 'demo.12.r0.a1', ['--load-time', '30']))).status?.pid ?? 0;
    const beats: string[] = [];
    const timeout = await rejection(sup.waitHealthy('demo.12.r0.a1', 1, { heartbeat: (d) => beats.push(d.state) }));
    expect(timeout.type).toBe('StartupTimeout');
    expect(timeout.message).toContain('within 1 s (state LOADING');
    expect(isAlive(pid)).toBe(true);

    const cancel = new AbortController();
    const waiting = sup.waitHealthy('demo.12.r0.a1', 30, { signal: cancel.signal });
    cancel.abort(new Error('activity cancelled'));
    await expect(waiting).rejects.toThrow('activity cancelled');

    const unknown = await rejection(sup.waitHealthy('nope', 1));
    expect(unknown.type).toBe('ShardNotFound');
  });
});

describe('ports', () => {
  it('never hands one port to two agents, and skips a port another program holds', async () => {
    const range = await freeRange(4);
    const holder = createServer();
    servers.push(holder);
    await new Promise<void>((r) => holder.listen(range.from, '127.0.0.1', () => r()));

    const nodeA = nodeId('ports-a');
    const nodeB = nodeId('ports-b');
    const a = supervisor({ nodeId: nodeA, stateDir: tempDir(), portRange: range });
    const b = supervisor({ nodeId: nodeB, stateDir: tempDir(), portRange: range });
    const ra = await a.sup.start(fakeSpec(nodeA, 'demo.5.r0.a1', ['--load-time', '2']));
    // Straight away: A's engine has not bound its port yet.
    const rb = await b.sup.start(fakeSpec(nodeB, 'demo.6.r0.a1', ['--load-time', '2']));
    const ports = [ra.status?.httpPort, rb.status?.httpPort];
    expect(new Set(ports).size).toBe(2);
    expect(ports).not.toContain(range.from);
    expect(a.logs.join('\n')).toContain(`port ${range.from} on 127.0.0.1 is in the agent's engine range but another program holds it`);
    await Promise.all([a.sup.waitHealthy('demo.5.r0.a1', 20), b.sup.waitHealthy('demo.6.r0.a1', 20)]);
  });
});

describe('helpers', () => {
  it('reads /proc stat fields after the last parenthesis of the command name', () => {
    const line = '1234 (we ird) (name)) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10';
    expect(parseStat(1234, line)).toEqual({ pid: 1234, state: 'S', ppid: 1, pgrp: 1234, startTicks: '987654' });
    expect(readStat(process.pid)?.pid).toBe(process.pid);
  });

  it('bounds a log by copy-truncate and tails its last lines', async () => {
    const file = join(tempDir(), 'x.log');
    writeFileSync(file, Array.from({ length: 100 }, (_, i) => `line ${i}`).join('\n') + '\n');
    expect(tailLines(file, 3)).toEqual(['line 97', 'line 98', 'line 99']);
    expect(await enforceLogLimit(file, 100)).toBe(true);
    expect(readFileSync(file, 'utf8')).toBe('');
    expect(tailLines(`${file}.1`, 1)).toEqual(['line 99']);
  });
});

describe('engine log retention', () => {
  it('deletes the logs and corrupt specs of stopped shards once older than the retention, and keeps a running shard’s', async () => {
    const node = nodeId('retention');
    const stateDir = tempDir();
    const portRange = await freeRange(4);
    const first = supervisor({ nodeId: node, stateDir, portRange });
    await first.sup.start(fakeSpec(node, 'demo.50.r0.a1', []));
    first.sup.close();
    const logs = join(stateDir, 'logs');
    const shards = join(stateDir, 'shards');
    const old = ['gone.1.r0.a1.log', 'gone.1.r0.a1.log.1'].map((name) => join(logs, name));
    const corrupt = join(shards, 'gone.2.r0.a1.json.corrupt');
    const recent = join(logs, 'gone.3.r0.a1.log');
    for (const file of [...old, corrupt, recent]) writeFileSync(file, 'x\n');
    const eightDaysAgo = new Date(Date.now() - 8 * 86_400_000);
    for (const file of [...old, corrupt, logPath(stateDir, 'demo.50.r0.a1')]) utimesSync(file, eightDaysAgo, eightDaysAgo);

    const second = supervisor({ nodeId: node, stateDir, portRange, logRetentionMs: 7 * 86_400_000 });
    expect((await second.sup.recover()).adopted).toHaveLength(1);
    for (const file of [...old, corrupt]) expect(existsSync(file), file).toBe(false);
    expect(existsSync(recent)).toBe(true);
    // Later sweeps (on a timer) find what has aged since.
    utimesSync(recent, eightDaysAgo, eightDaysAgo);
    expect(await second.sup.sweepOldFiles()).toEqual([recent]);
    // The running (adopted) shard keeps its log however old.
    expect(existsSync(logPath(stateDir, 'demo.50.r0.a1'))).toBe(true);
    expect(second.logs).toContainEqual(expect.stringMatching(/deleted 3 file\(s\) of stopped shards older than 7 day\(s\)/));
  });
});

describe('secrets stay on the host', () => {
  it('gives an engine the host variables its profile references, from --env-file and --pass-env, and nothing else of the agent', async () => {
    const node = nodeId('secrets');
    const stateDir = tempDir();
    const envFile = join(tempDir(), 'engine.env');
    writeFileSync(envFile, '# secrets\nexport WANDB_KEY="wandb-from-file"\nUNUSED=not-referenced\n', { mode: 0o600 });
    process.env.LLMGW_TEST_HF_TOKEN = 'hf-from-agent-env';
    process.env.LLMGW_TEST_NOT_PASSED = 'agent-only';
    try {
      const { sup } = supervisor({
        nodeId: node,
        stateDir,
        portRange: await freeRange(4),
        passEnv: ['LLMGW_TEST_HF_TOKEN'],
        envFile,
      });
      const spec = fakeSpec(node, 'demo.40.r0.a1', []);
      spec.profile!.envFromHost = { HF_TOKEN: 'LLMGW_TEST_HF_TOKEN', WANDB_API_KEY: 'WANDB_KEY' };
      const started = await sup.start(spec);
      const env = readEnviron(started.status?.pid ?? 0)!;
      expect(env).toMatchObject({
        HF_TOKEN: 'hf-from-agent-env',
        WANDB_API_KEY: 'wandb-from-file',
        LLMGW_TEST_HF_TOKEN: 'hf-from-agent-env',
      });
      expect(env.UNUSED).toBeUndefined();
      expect(env.LLMGW_TEST_NOT_PASSED).toBeUndefined();
      // The spec names the variables, never their values; files are the agent's alone.
      const record = readFileSync(recordPath(stateDir, 'demo.40.r0.a1'), 'utf8');
      expect(record).toContain('LLMGW_TEST_HF_TOKEN');
      expect(record).not.toMatch(/hf-from-agent-env|wandb-from-file/);
      expect(statSync(stateDir).mode & 0o777).toBe(0o700);
      expect(statSync(recordPath(stateDir, 'demo.40.r0.a1')).mode & 0o777).toBe(0o600);
      expect(statSync(logPath(stateDir, 'demo.40.r0.a1')).mode & 0o777).toBe(0o600);

      const missing = fakeSpec(node, 'demo.41.r0.a1', []);
      missing.profile!.envFromHost = { HF_TOKEN: 'NOT_GIVEN_TOKEN' };
      const failure = await rejection(sup.start(missing));
      expect(failure.type).toBe('HostEnvMissing');
      expect(failure.nonRetryable).toBe(true);
      expect(failure.message).toMatch(
        /takes HF_TOKEN \(from NOT_GIVEN_TOKEN\) from this host.*--pass-env NOT_GIVEN_TOKEN or put it in its --env-file/,
      );
      expect(existsSync(recordPath(stateDir, 'demo.41.r0.a1'))).toBe(false);
    } finally {
      delete process.env.LLMGW_TEST_HF_TOKEN;
      delete process.env.LLMGW_TEST_NOT_PASSED;
    }
  });

  it('reads an env file of NAME=value lines and names a bad line by its number, never its value', () => {
    expect(parseEnvFile('A=1\n# c\n\nexport B = "two words"\nC=\'x=y\'\n', 'f')).toEqual({ A: '1', B: 'two words', C: 'x=y' });
    expect(() => parseEnvFile('A=1\nsecret-value-without-name\n', 'f')).toThrow(/^f line 2: expected NAME=value/);
    expect(() => parseEnvFile('A=1\nsecret-value-without-name\n', 'f')).not.toThrow(/secret-value/);
  });
});
