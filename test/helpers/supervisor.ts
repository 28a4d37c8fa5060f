// The engine supervisor's test harness: supervisors over real fake-engine processes on free
// ports, each test's state dirs, node ids and hand-started processes, all killed and removed
// after each test (useSupervisorHarness), plus the StartShard specs and waits the tests share.
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import type { Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { create } from '@bufbuild/protobuf';
import { afterEach, beforeAll } from 'vitest';
import { isPortFree } from '../../common/ports.js';
import { Engine, EngineProfileSchema, StartShardSchema, type ShardStatus, type StartShard } from '../../proto/gen/llmgw/v1/shard_pb.js';
import { scanMarked } from '../../agent/supervisor/processes/markers.js';
import { createSupervisor, type Supervisor, type SupervisorOptions } from '../../agent/supervisor/supervisor.js';

export const BIN = resolve(__dirname, '../../bin/llmgw.js');
export const FAKE_ENGINE = [process.execPath, BIN, 'fake-engine'];
export const ROOT = resolve(__dirname, '../..');
const RUN = `${process.pid}-${Math.random().toString(36).slice(2, 7)}`;

const dirs: string[] = [];
const supervisors: Supervisor[] = [];
const nodeIds: string[] = [];
/** Pids a test started outside a supervisor: killed (with their process group) after it. */
export const extraPids: number[] = [];
/** Servers a test listens with: closed after it. */
export const servers: Server[] = [];

/** Checks the build is there, and after each test kills every engine it left and removes its dirs. */
export function useSupervisorHarness(): void {
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
    dirs.length = 0;
    supervisors.length = 0;
    nodeIds.length = 0;
    extraPids.length = 0;
    servers.length = 0;
  });
}

export function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-sup-'));
  dirs.push(dir);
  return dir;
}

export function nodeId(name: string): string {
  const id = `${name}-${RUN}`;
  nodeIds.push(id);
  return id;
}

/** A small range in 20000-30000 whose ports are free now. */
export async function freeRange(size: number): Promise<{ from: number; to: number }> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const from = 20000 + Math.floor(Math.random() * 9900);
    let ok = true;
    for (let p = from; p < from + size && ok; p++) ok = await isPortFree(p, '127.0.0.1');
    if (ok) return { from, to: from + size - 1 };
  }
  throw new Error('no free port range');
}

export interface Harness {
  sup: Supervisor;
  logs: string[];
  transitions: ShardStatus[];
}

export function supervisor(options: Partial<SupervisorOptions> & Pick<SupervisorOptions, 'nodeId' | 'stateDir' | 'portRange'>): Harness {
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

/**
 * One host as the agents that follow each other on it see it: its node id, state dir and free
 * port range, and startAgent() to start the next supervisor on them (a restart is a second call).
 */
export async function agentHost(name: string, ports = 4) {
  const node = nodeId(name);
  const stateDir = tempDir();
  const portRange = await freeRange(ports);
  const startAgent = (over: Partial<SupervisorOptions> = {}): Harness => supervisor({ nodeId: node, stateDir, portRange, ...over });
  return { node, stateDir, portRange, startAgent };
}

export function fakeSpec(node: string, shardId: string, args: string[], gpus = [2, 3]): StartShard {
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

export async function waitFor<T>(what: string, fn: () => T | undefined, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = fn();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** A fake engine started by hand, as a stray from nowhere would be. */
export function spawnByHand(env: Record<string, string>, port: number): number {
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
