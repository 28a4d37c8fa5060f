// The engine supervisor after an agent restart: engines that outlived it (even a kill -9) adopted,
// same pid, by the next agent; engines that died meanwhile reported Failed; strangers killed.
import { spawn } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { create, toJsonString } from '@bufbuild/protobuf';
import { describe, expect, it } from 'vitest';
import { ShardState, StartShardSchema, StopShardSchema } from '../../proto/gen/llmgw/v1/shard_pb.js';
import { scanMarked } from '../../agent/supervisor/processes/markers.js';
import { isAlive } from '../../common/proc-stat.js';
import { readEnviron } from '../../agent/supervisor/processes/proc.js';
import { checkStateDirWritable, logPath, readAllRecords, recordPath, writeRecordAtomic } from '../../agent/supervisor/spec-store.js';
import {
  agentHost,
  extraPids,
  FAKE_ENGINE,
  fakeSpec,
  nodeId,
  ROOT,
  spawnByHand,
  useSupervisorHarness,
  waitFor,
} from '../helpers/supervisor.js';

useSupervisorHarness();

describe('an agent restart', () => {
  it('adopts an engine a previous agent left running: same pid, Ready, stoppable', async () => {
    const { node, stateDir, startAgent } = await agentHost('adopt');
    const a = startAgent();
    const spec = fakeSpec(node, 'demo.1.r0.a1', []);
    const started = await a.sup.start(spec);
    const pid = started.status?.pid ?? 0;
    await a.sup.waitHealthy(spec.shardId, 20);
    // The agent dies; its engine does not.
    a.sup.close();

    const b = startAgent();
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
    const { node, stateDir, portRange, startAgent } = await agentHost('kill9');
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

    const b = startAgent();
    const { adopted, unidentified } = await b.sup.recover();
    expect(unidentified).toEqual([]);
    expect(adopted.map((r) => r.status?.pid)).toEqual([pid]);
    expect((await b.sup.waitHealthy(spec.shardId, 10)).pid).toBe(pid);
    // Started again by a retried activity: still the same engine, nothing new.
    expect((await b.sup.start(spec)).status?.pid).toBe(pid);
    expect(scanMarked(node).map((m) => m.pid)).toEqual([pid]);
  });

  it('finds by its markers an engine spawned just before the previous agent died, and records its pid', async () => {
    const { node, stateDir, portRange, startAgent } = await agentHost('nopid');
    const orphan = fakeSpec(node, 'demo.8.r0.a1', []);
    const never = fakeSpec(node, 'demo.9.r0.a1', [], [4, 5]);
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

    const b = startAgent();
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
    const { node, stateDir, startAgent } = await agentHost('diedwhiledown');
    const a = startAgent();
    const spec = fakeSpec(node, 'demo.10.r0.a1', []);
    const pid = (await a.sup.start(spec)).status?.pid ?? 0;
    a.sup.close();
    process.kill(-pid, 'SIGKILL');
    await waitFor('the engine to die', () => (isAlive(pid) ? undefined : true));

    const b = startAgent();
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
    const { node, stateDir, portRange, startAgent } = await agentHost('strangers', 6);
    const other = nodeId('other');
    const a = startAgent();
    const corrupted = await a.sup.start(fakeSpec(node, 'demo.2.r0.a1', []));
    const corruptedPid = corrupted.status?.pid ?? 0;
    a.sup.close();
    writeFileSync(recordPath(stateDir, 'demo.2.r0.a1'), '{"version": 1, "spec": {"shardId": "demo.2');

    const ghostPid = spawnByHand({ LLMGW_NODE_ID: node, LLMGW_SHARD_ID: 'ghost' }, portRange.to);
    const othersPid = spawnByHand({ LLMGW_NODE_ID: other, LLMGW_SHARD_ID: 'theirs' }, portRange.to - 1);
    await waitFor('the hand-started engines', () => (readEnviron(ghostPid) && readEnviron(othersPid) ? true : undefined));

    const b = startAgent();
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
