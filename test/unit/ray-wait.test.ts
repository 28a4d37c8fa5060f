// Guards the Ray wait: rank 0's engine starts only once `ray status` shows every node,
// the wait gives up at the startup timeout with an error naming the address and what Ray
// last said, a stop or a dead head ends it at once, and a hung `ray status` never holds it.
// `ray` is test/fixtures/ray/fake-ray, which replays `ray status` output recorded from Ray 2.60.
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { create } from '@bufbuild/protobuf';
import { afterEach, describe, expect, it } from 'vitest';
import { FailureType } from '../../common/failures.js';
import type { ProcessSpec } from '../../agent/engines/types.js';
import { createRayWait } from '../../agent/ray-wait.js';
import { scanMarked } from '../../agent/supervisor/processes/markers.js';
import { isAlive } from '../../common/proc-stat.js';
import { createSupervisor, type Supervisor } from '../../agent/supervisor/supervisor.js';
import { rejection } from '../helpers/failures.js';
import { Engine, EngineProfileSchema, Launcher, StartShardSchema, type StartShard } from '../../proto/gen/llmgw/v1/shard_pb.js';

const RAY_DIR = resolve(__dirname, '../fixtures/ray');
const FAKE_RAY = join(RAY_DIR, 'fake-ray');
const RUN = `${process.pid}-${Math.random().toString(36).slice(2, 7)}`;
const ADDRESS = '10.0.0.1:6379';

let dirs: string[] = [];
let supervisors: Supervisor[] = [];
let nodeIds: string[] = [];

afterEach(() => {
  for (const sup of supervisors) sup.close();
  for (const node of nodeIds) {
    for (const marked of scanMarked(node)) {
      for (const target of [-marked.pid, marked.pid]) {
        try {
          process.kill(target, 'SIGKILL');
        } catch {
          // already gone
        }
      }
    }
  }
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  for (const name of ['LLMGW_FAKE_RAY_SCRIPT', 'LLMGW_FAKE_RAY_CALLS', 'LLMGW_FAKE_RAY_START']) delete process.env[name];
  dirs = [];
  supervisors = [];
  nodeIds = [];
});

/** Points the fake ray at a script of steps (see fake-ray) and returns a reader of its call log. */
function fakeRay(steps: string[]): { calls: () => string[] } {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-ray-'));
  dirs.push(dir);
  const script = join(dir, 'script');
  const calls = join(dir, 'calls');
  writeFileSync(script, steps.map((step) => `${step}\n`).join(''));
  writeFileSync(calls, '');
  process.env.LLMGW_FAKE_RAY_SCRIPT = script;
  process.env.LLMGW_FAKE_RAY_CALLS = calls;
  return { calls: () => readFileSync(calls, 'utf8').split('\n').filter(Boolean) };
}

function shard(startupTimeoutSeconds = 0): StartShard {
  return create(StartShardSchema, { shardId: 'big.1.r0.a1', replicaId: 'replica/big/1', startupTimeoutSeconds });
}

const engine: ProcessSpec = { role: 'engine', argv: ['vllm', 'serve'], env: {}, waitForRayNodes: 2, rayAddress: ADDRESS, blocking: true };

function hungPids(calls: string[]): number[] {
  return calls.filter((line) => line.startsWith('hang pid ')).map((line) => Number(line.slice('hang pid '.length)));
}

describe('the Ray wait', () => {
  it('returns once ray status shows every node, polling the leader address until then', async () => {
    const ray = fakeRay(['status-starting-traceback.txt 1', 'status-starting.txt', 'status-one-node.txt', 'status-two-nodes.txt']);
    const logs: string[] = [];
    await createRayWait({ rayCommand: [FAKE_RAY], pollMs: 10, log: (line) => logs.push(line) })(
      shard(),
      engine,
      new AbortController().signal,
    );
    expect(ray.calls()).toEqual(Array.from({ length: 4 }, () => `status --address ${ADDRESS}`));
    expect(logs).toEqual([
      `shard big.1.r0.a1: the Ray cluster at ${ADDRESS} has 1 of 2 nodes`,
      `shard big.1.r0.a1: the Ray cluster at ${ADDRESS} has 2 of 2 nodes`,
      expect.stringMatching(new RegExp(`^shard big.1.r0.a1: all 2 Ray nodes joined at ${ADDRESS} after \\d+\\.\\d s$`)),
    ]);
  });

  it('gives up at the startup timeout, naming the address, the count and what ray status last said', async () => {
    fakeRay(['status-one-node.txt']);
    const err = await rejection(createRayWait({ rayCommand: [FAKE_RAY], pollMs: 50 })(shard(1), engine, new AbortController().signal));
    expect(err.type).toBe(FailureType.StartupTimeout);
    expect(err.nonRetryable).toBe(true);
    expect(err.message).toContain(`the Ray cluster at ${ADDRESS} has 1 of 2 nodes after 1 s (the startup timeout)`);
    expect(err.message).toContain(
      `last \`${FAKE_RAY} status --address ${ADDRESS}\`: exit 0: Active: | 1 node_225711768636e29267139f856c1fcd5a36070da8c60684625ee69b96 | Pending:`,
    );
  });

  it('quotes the end of the error when ray status keeps failing', async () => {
    fakeRay(['status-starting-traceback.txt 1']);
    const err = await rejection(createRayWait({ rayCommand: [FAKE_RAY], pollMs: 50 })(shard(1), engine, new AbortController().signal));
    expect(err.message).toContain('has 0 of 2 nodes');
    expect(err.message).toContain('exit 1: ');
    expect(err.message).toContain("AttributeError: 'NoneType' object has no attribute 'decode'");
  });

  it('cuts off a ray status that does not answer and asks again', async () => {
    const ray = fakeRay(['hang', 'status-two-nodes.txt']);
    await createRayWait({ rayCommand: [FAKE_RAY], pollMs: 10, statusTimeoutMs: 300 })(shard(), engine, new AbortController().signal);
    const hung = hungPids(ray.calls());
    expect(hung).toHaveLength(1);
    expect(isAlive(hung[0]!)).toBe(false);
  });

  it('ends at the startup timeout even while a ray status hangs', async () => {
    const ray = fakeRay(['hang']);
    const err = await rejection(
      createRayWait({ rayCommand: [FAKE_RAY], statusTimeoutMs: 600_000 })(shard(1), engine, new AbortController().signal),
    );
    expect(err.type).toBe(FailureType.StartupTimeout);
    expect(err.message).toContain(
      `has 0 of 2 nodes after 1 s (the startup timeout); \`${FAKE_RAY} status --address ${ADDRESS}\` got no answer within 1.0 s`,
    );
    expect(hungPids(ray.calls()).every((pid) => !isAlive(pid))).toBe(true);
  });

  it('is abandoned at once when the shard is stopped, killing the ray status it waits on', async () => {
    const ray = fakeRay(['hang']);
    const stop = new AbortController();
    const waiting = createRayWait({ rayCommand: [FAKE_RAY] })(shard(), engine, stop.signal);
    while (hungPids(ray.calls()).length === 0) await new Promise((r) => setTimeout(r, 20));
    stop.abort(new Error('stop requested: undeploy'));
    const err = await rejection(waiting);
    expect(err.nonRetryable).toBe(false);
    expect(err.message).toBe(
      `shard big.1.r0.a1: wait for the Ray cluster at ${ADDRESS} abandoned (0 of 2 nodes): stop requested: undeploy`,
    );
    expect(isAlive(hungPids(ray.calls())[0]!)).toBe(false);
  });

  it('says Ray is missing instead of polling a command that cannot run', async () => {
    const err = await rejection(createRayWait({ rayCommand: ['/nonexistent/ray'] })(shard(), engine, new AbortController().signal));
    expect(err.type).toBe(FailureType.InvalidSpec);
    expect(err.message).toContain('cannot run `/nonexistent/ray status --address 10.0.0.1:6379`: /nonexistent/ray not found');
  });

  it('refuses an engine that names no Ray address', async () => {
    const err = await rejection(
      createRayWait({ rayCommand: [FAKE_RAY] })(shard(), { ...engine, rayAddress: undefined }, new AbortController().signal),
    );
    expect(err.type).toBe(FailureType.InvalidSpec);
  });
});

describe('the Ray wait inside the supervisor, on rank 0 of a 2-node Ray replica', () => {
  function rank0(startupTimeoutSeconds = 0): StartShard {
    return create(StartShardSchema, {
      replicaId: 'replica/big/1',
      shardId: `big.1.r0.a1-${RUN}`,
      deployment: 'big',
      rank: 0,
      nnodes: 2,
      leaderAddress: '127.0.0.1',
      // Inside the supervisor's --port-range below (27000+…-29999): the agent refuses a rank 0 port outside it.
      leaderPort: 29999,
      gpuIndices: [0],
      startupTimeoutSeconds,
      profile: create(EngineProfileSchema, {
        name: 'fake-ray-2x1',
        engine: Engine.FAKE,
        launcher: Launcher.RAY,
        nodes: 2,
        modelSource: 'llmgw/fake',
        servedName: 'big',
      }),
    });
  }

  function supervisorWithRay(name: string): Supervisor {
    const dir = mkdtempSync(join(tmpdir(), 'llmgw-ray-sup-'));
    dirs.push(dir);
    const nodeId = `${name}-${RUN}`;
    nodeIds.push(nodeId);
    const calls = process.env.LLMGW_FAKE_RAY_CALLS!;
    const sup = createSupervisor({
      nodeId,
      stateDir: dir,
      portRange: { from: 27000 + Math.floor(Math.random() * 2000), to: 29999 },
      advertiseAddress: '127.0.0.1',
      // The engine only notes when it started: the order against the ray calls is the point.
      engineContext: {
        fakeEngineCommand: ['sh', '-c', `echo engine >> '${calls}'; exec sleep 600`, 'fake-engine'],
        rayCommand: [FAKE_RAY],
      },
      passEnv: ['LLMGW_FAKE_RAY_CALLS', 'LLMGW_FAKE_RAY_START'],
      waitForRay: createRayWait({ rayCommand: [FAKE_RAY], pollMs: 10 }),
      stopGraceSeconds: 1,
      log: () => undefined,
    });
    supervisors.push(sup);
    return sup;
  }

  it("starts rank 0's engine only after ray status shows both nodes", async () => {
    const ray = fakeRay(['status-starting.txt', 'status-one-node.txt', 'status-two-nodes.txt']);
    const sup = supervisorWithRay('ray-order');
    await sup.start(rank0());
    while (!ray.calls().includes('engine')) await new Promise((r) => setTimeout(r, 20));
    const calls = ray.calls();
    // The head is spawned before the first status poll, but the two are separate processes
    // and either may note its call first (CI saw the poll first on a busy machine); what must
    // hold is one head, and the engine only after the third poll saw both nodes.
    const head = 'start --head --port 29999 --node-ip-address 127.0.0.1 --block';
    expect(calls.filter((call) => call === head)).toHaveLength(1);
    expect(calls.indexOf(head)).toBeLessThan(calls.indexOf('engine'));
    expect(calls.filter((call) => call !== head)).toEqual([
      'status --address 127.0.0.1:29999',
      'status --address 127.0.0.1:29999',
      'status --address 127.0.0.1:29999',
      'engine',
    ]);
  });

  it('fails the start as soon as the Ray head exits, rather than waiting out the startup timeout', async () => {
    fakeRay(['status-one-node.txt']);
    process.env.LLMGW_FAKE_RAY_START = 'exit';
    const sup = supervisorWithRay('ray-head-dies');
    const spec = rank0(600);
    // start() returns once the head is spawned (rank 1 is started next, completing the
    // cluster); the head's death then fails the shard at once.
    await sup.start(spec);
    const err = await rejection(sup.waitHealthy(spec.shardId, 600));
    expect(err.type).toBe(FailureType.EngineExited);
    expect(err.message).toMatch(/ray-head \(pid \d+\) exited/);
    expect(existsSync(process.env.LLMGW_FAKE_RAY_CALLS!) && readFileSync(process.env.LLMGW_FAKE_RAY_CALLS!, 'utf8')).not.toContain(
      'engine',
    );
  });
});
