// Engines without root, and with a key (issue 26, point 4): a real agent, started as this test's
// (root) user, starts a fake engine as an unprivileged user (/proc/PID/status shows a non-zero
// uid), and with --engine-key-file each engine requires its replica run's key, derived from the
// file's: it refuses another run's key and the file's own, while a router given the file serves
// both runs. With --engine-uid-range (issue 37) a second agent runs its
// engines as one uid each from the range (supervisor-engine-uids.test.ts shows what that stops).
import { join } from 'node:path';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { describe, expect, it } from 'vitest';
import { create } from '@bufbuild/protobuf';
import { WaitHealthySchema, type RunningShard, type ShardStatus, type StartShard } from '../../proto/gen/llmgw/v1/shard_pb.js';
import { lookupUser } from '../../agent/engine-identity.js';
import { engineKeyFor } from '../../common/engine-keys.js';
import { uniqueId } from '../helpers/temporal.js';
import { useCallWorker } from '../helpers/call-worker.js';
import { randomPortRange, startTcpAgent } from '../helpers/fleet.js';
import { enginesOf } from '../helpers/processes.js';
import { fakeShardSpec } from '../helpers/shards.js';
import { router, useRouterHarness } from '../helpers/router-harness.js';

const nodeId = uniqueId('engine-user');
const ownUidNode = uniqueId('engine-uids');
const KEY = `engine-key-${uniqueId('k')}`;
const calls = useCallWorker('engine-user-calls', [nodeId, ownUidNode]);
const runningAsRoot = process.getuid?.() === 0;

useRouterHarness();

function call<T>(activity: string, arg: unknown, workflowId: string, node = nodeId): Promise<T> {
  return calls.call<T>(node, activity, arg, workflowId);
}

/** The real, effective, saved and filesystem uids of a process. */
function uids(pid: number): number[] {
  const line = /^Uid:\s+(.*)$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]!;
  return line.trim().split(/\s+/).map(Number);
}

describe('engines without root', () => {
  it("runs every engine with a non-zero uid, each with its replica run's key: another run's key and the fleet key are refused while a router serves both runs", async () => {
    const keyFile = join(mkdtempSync(join(tmpdir(), 'llmgw-engine-key-')), 'engine.key');
    writeFileSync(keyFile, `${KEY}\n`, { mode: 0o600 });
    const { proc: agent } = await startTcpAgent(nodeId, {
      gpus: 'builtin:h100x8',
      env: {},
      range: randomPortRange(20),
      extra: ['--reconcile', 'dry-run', '--engine-key-file', keyFile],
    });
    const expected = runningAsRoot ? (lookupUser('llmgw-engine') ?? lookupUser('nobody')) : undefined;
    if (runningAsRoot) expect(agent.output()).toMatch(new RegExp(`engines run as ${expected!.name} \\(uid ${expected!.uid}\\)`));

    const spec: StartShard = fakeShardSpec({ nodeId, deployment: 'engine-user', gpus: [0], args: ['--load-time', '0'] });
    const running = await call<RunningShard>('startShard', spec, spec.replicaId);
    // A second replica run on the same host, with a key of its own.
    const specB: StartShard = fakeShardSpec({ nodeId, deployment: 'engine-user-b', gpus: [1], args: ['--load-time', '0'] });
    await call<RunningShard>('startShard', specB, specB.replicaId);
    const [ready, readyB] = await Promise.all(
      [spec, specB].map((s) =>
        call<ShardStatus>('waitHealthy', create(WaitHealthySchema, { shardId: s.shardId, timeoutSeconds: 30 }), uniqueId('wait')),
      ),
    );
    // Each engine's key is its run chain's (the first run of the workflow that placed and sent it).
    const chainOf = async (s: StartShard) =>
      (await calls.client().workflow.getHandle(s.replicaId).describe()).raw.workflowExecutionInfo!.firstRunId!;
    const [keyA, keyB] = [engineKeyFor(KEY, await chainOf(spec)), engineKeyFor(KEY, await chainOf(specB))];
    // Every process of this node's engines, not only the one the agent spawned.
    const engines = enginesOf([nodeId]);
    expect(engines.map((e) => e.pid)).toContain(running.status!.pid);
    for (const engine of engines) {
      const ids = uids(engine.pid);
      expect(ids.every((uid) => uid !== 0)).toBe(true);
      if (expected) expect(ids).toEqual([expected.uid, expected.uid, expected.uid, expected.uid]);
    }
    // The key is in the engine's environment, which only its user and root can read: not its argv.
    const cmdline = readFileSync(`/proc/${running.status!.pid}/cmdline`, 'utf8');
    expect(cmdline).not.toContain(KEY);
    expect(cmdline).not.toContain(keyA);

    const engineUrl = `http://127.0.0.1:${ready!.httpPort}`;
    const engineUrlB = `http://127.0.0.1:${readyB!.httpPort}`;
    const body = JSON.stringify({ model: 'engine-user', max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] });
    const post = (headers: Record<string, string>) =>
      fetch(`${engineUrl}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body });
    expect((await post({})).status).toBe(401);
    expect((await post({ authorization: 'Bearer wrong' })).status).toBe(401);
    // Neither the other run's key (what engine B reads from its own environment) nor the fleet's.
    expect((await post({ authorization: `Bearer ${keyB}` })).status).toBe(401);
    expect((await post({ authorization: `Bearer ${KEY}` })).status).toBe(401);
    expect((await post({ authorization: `Bearer ${keyA}` })).status).toBe(200);
    expect((await fetch(`${engineUrl}/health`)).status).toBe(200);

    // A router given the fleet key file serves both runs, sending each its own run's key (from
    // the chain its route names); one without the key is refused by the engine.
    const chains = { a: await chainOf(spec), b: await chainOf(specB) };
    const keyed = await router(
      [
        { servedName: 'engine-user', endpoint: engineUrl, chain: chains.a },
        { servedName: 'engine-user-b', endpoint: engineUrlB, chain: chains.b },
      ],
      { engineKey: KEY },
    );
    for (const model of ['engine-user', 'engine-user-b']) {
      const served = await fetch(`${keyed.base}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: body.replace('"engine-user"', JSON.stringify(model)),
      });
      expect(served.status).toBe(200);
    }
    const unkeyed = await router([{ servedName: 'engine-user', endpoint: engineUrl }]);
    const refused = await fetch(`${unkeyed.base}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body,
    });
    expect(refused.status).toBe(401);
  });

  it.skipIf(!runningAsRoot)(
    "with --engine-uid-range, runs each engine as its own uid from the range, in the engine user's group",
    async () => {
      const user = lookupUser('llmgw-engine') ?? lookupUser('nobody');
      const from = 61000 + Math.floor(Math.random() * 900) * 10;
      const { proc: agent } = await startTcpAgent(ownUidNode, {
        gpus: 'builtin:h100x8',
        env: {},
        range: randomPortRange(20),
        extra: ['--reconcile', 'dry-run', '--engine-uid-range', `${from}-${from + 9}`],
      });
      expect(agent.output()).toContain(`engines run as a uid of their own each, from ${from}-${from + 9}, in ${user!.name}'s group`);
      const pids: number[] = [];
      for (const gpu of [0, 1]) {
        const spec = fakeShardSpec({ nodeId: ownUidNode, deployment: `engine-uids-${gpu}`, gpus: [gpu], args: ['--load-time', '0'] });
        pids.push((await call<RunningShard>('startShard', spec, spec.replicaId, ownUidNode)).status!.pid);
      }
      const [a, b] = pids.map((pid) => uids(pid));
      expect(a).toEqual([a![0], a![0], a![0], a![0]]);
      expect(b).toEqual([b![0], b![0], b![0], b![0]]);
      expect(a![0]).not.toBe(b![0]);
      for (const ids of [a!, b!]) expect(ids[0]! >= from && ids[0]! <= from + 9).toBe(true);
      expect(readFileSync(`/proc/${pids[0]}/status`, 'utf8')).toMatch(new RegExp(`^Gid:\\s+${user!.gid}\\s`, 'm'));
    },
  );
});
