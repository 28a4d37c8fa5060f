// Reconciliation end to end, with real agents, real engines, a real control worker and a
// real router: Temporal losing everything, a profile removed from the catalog, an engine
// nobody can describe, the same report reconciled twice, and agents killed in the middle
// of a startShard. Runs on an in-memory dev server of its own, since it restarts it empty.
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { spawn } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { findFreePort } from '../../common/ports.js';
import { CONTROL_TASK_QUEUE } from '../../common/names.js';
import { connectAdmin } from '../../agent/admin/client.js';
import { signalGroup } from '../../agent/supervisor/processes/proc.js';
import type { ReconcileResult } from '../../common/reconcile-types.js';
import { enginesOf, eventually, runLlmgw, sleep, spawnLlmgw } from '../helpers/processes.js';
import { uniqueId } from '../helpers/temporal.js';
import { recordHistory } from '../helpers/histories.js';
import {
  actionOfAnyRun,
  type ActionOutcome,
  agents,
  allocations,
  catalogFile,
  deploy,
  inventoryDir,
  nodeIds,
  nodeView,
  port,
  raceNodes,
  reconcile,
  restartTemporalEmpty,
  routed,
  routerAdmin,
  routerProc,
  startAgent,
  status,
  undeploy,
  useReconcileStack,
  withClient,
  workerProc,
  env,
} from '../helpers/reconcile-stack.js';

useReconcileStack();

const first = uniqueId('rec-one');
const second = uniqueId('rec-two');

describe('reconciliation', () => {
  it('rebuilds everything from the agents within 30 s when Temporal loses all its data: same engines, same GPUs, the router serves again', async () => {
    await deploy('life', first, 2, 'one-gpu');
    await deploy('life', second, 1, 'tp2');
    await eventually('the router serves both', async () => (await routed(first)) && (await routed(second)), 20_000, 250).catch(
      async (error: unknown) => {
        console.log(routerProc.output().slice(-3000));
        const health = await fetch(`http://${routerAdmin}/health`)
          .then((r) => r.text())
          .catch(String);
        console.log(health);
        throw error;
      },
    );
    // Every node has its reconcile Schedule.
    await withClient(async (client) => {
      for (const nodeId of nodeIds)
        expect((await client.schedule.getHandle(`reconcile/${nodeId}`).describe()).action.type).toBe('startWorkflow');
    });
    const pidsBefore = enginesOf(nodeIds)
      .map((e) => e.pid)
      .sort();
    expect(pidsBefore).toHaveLength(3);
    const allocationsBefore = Object.fromEntries(await Promise.all(nodeIds.map(async (id) => [id, await allocations(id)] as const)));

    await restartTemporalEmpty();
    const back = Date.now();

    const rebuilt = await eventually(
      'both deployments rebuilt and Ready, and routed',
      async () => {
        const views = await Promise.all([status(first), status(second)]);
        // Each node's reconciliation adds what it found: a rebuilt deployment grows to what runs.
        if (!views.every((v) => v.phase === 'Ready') || views[0]!.ready !== 2) return undefined;
        return (await routed(first)) && (await routed(second)) ? views : undefined;
      },
      60_000,
      250,
    ).catch((error: unknown) => {
      // Say where it stuck: what each agent and the worker printed since the server came back.
      for (const [nodeId, agent] of agents) console.log(`--- agent ${nodeId}\n${agent.proc.output().slice(-2500)}`);
      console.log(`--- worker\n${workerProc.output().slice(-4000)}`);
      throw error;
    });
    const recoverySeconds = (Date.now() - back) / 1000;
    console.log(`rebuilt from the agents' reports ${recoverySeconds.toFixed(1)} s after the empty server came back`);
    expect(recoverySeconds).toBeLessThanOrEqual(30);
    expect(rebuilt.map((v) => [v.desired, v.ready])).toEqual([
      [2, 2],
      [1, 1],
    ]);
    expect(rebuilt[0]!.rebuilt).toMatch(/rebuilt by reconciliation/);
    expect(
      enginesOf(nodeIds)
        .map((e) => e.pid)
        .sort(),
    ).toEqual(pidsBefore);
    for (const nodeId of nodeIds) expect(await allocations(nodeId)).toEqual(allocationsBefore[nodeId]);
    recordHistory(`replica/${first}/1`, 'replica-adopted-after-temporal-loss', `127.0.0.1:${port}`);

    // A new deployment lands on GPUs nobody holds.
    const held = new Set(
      Object.entries(allocationsBefore).flatMap(([id, list]) =>
        list.flatMap((entry) =>
          entry
            .split(':')[1]!
            .split(',')
            .map((gpu) => `${id}:${gpu}`),
        ),
      ),
    );
    const third = uniqueId('rec-three');
    const view = await deploy('life', third, 2, 'one-gpu');
    const taken = view.replicas.flatMap((r) =>
      r.gpus.flatMap((g) =>
        g
          .split(':')[1]!
          .split(',')
          .map((gpu) => `${g.split(':')[0]}:${gpu}`),
      ),
    );
    expect(taken).toHaveLength(2);
    for (const gpu of taken) expect(held.has(gpu), `${gpu} was already held`).toBe(false);
    await undeploy(third);
  });

  it('stops the engines of a profile removed from the catalog and frees their GPUs, leaving the others alone', async () => {
    const keptPids = enginesOf(nodeIds)
      .filter((e) => e.env.LLMGW_REPLICA_ID?.startsWith(`replica/${first}/`))
      .map((e) => e.pid)
      .sort();
    const removed = (await status(second)).replicas.flatMap((r) => r.shards.map((s) => s.shardId));
    expect(keptPids).toHaveLength(2);
    writeFileSync(
      catalogFile,
      readFileSync(catalogFile, 'utf8').replace(/ {6}- name: tp2\n( {8}.*\n)+? {8}startupTimeoutSeconds: 30\n/, ''),
    );
    expect(readFileSync(catalogFile, 'utf8')).not.toMatch(/name: tp2/);

    const results = await Promise.all(nodeIds.map((id) => reconcile(id)));
    // The catalog notifier reconciles every node too when a profile goes (revocation reaches what
    // runs): either run may be the one that stopped a shard.
    const stopOf = (shardId: string): Promise<ActionOutcome> => {
      const isTheStop = (a: ActionOutcome): boolean => a.kind === 'stop' && a.shardId === shardId;
      const own = results.flatMap((r) => r.actions).find((a) => a.effective && isTheStop(a));
      return eventually(`the stop of ${shardId}`, async () => {
        if (own) return own;
        for (const nodeId of nodeIds) {
          const found = await actionOfAnyRun(nodeId, isTheStop);
          if (found) return found;
        }
        return undefined;
      });
    };
    const stops = await Promise.all(removed.map(stopOf));
    expect(stops.map((a) => ('shardId' in a ? a.shardId : ''))).toEqual(removed);
    expect(stops[0]).toMatchObject({ effective: true, reason: 'model life profile tp2 is no longer in the catalog' });
    await eventually("the removed profile's engines gone", () =>
      enginesOf(nodeIds).some((e) => e.env.LLMGW_REPLICA_ID?.startsWith(`replica/${second}/`)) ? undefined : true,
    );
    for (const nodeId of nodeIds)
      expect((await allocations(nodeId)).filter((a) => removed.some((id) => a.startsWith(`${id}:`)))).toEqual([]);
    // The deployment says why and starts nothing new; the other deployment did not notice.
    const degraded = await eventually('the deployment says its profile left the catalog', async () => {
      const view = await status(second);
      return view.reason.includes('no longer in the catalog') ? view : undefined;
    });
    expect(degraded.phase).toBe('Degraded');
    await sleep(3_000);
    expect(enginesOf(nodeIds).filter((e) => e.env.LLMGW_REPLICA_ID?.startsWith(`replica/${second}/`))).toEqual([]);
    expect(
      enginesOf(nodeIds)
        .filter((e) => e.env.LLMGW_REPLICA_ID?.startsWith(`replica/${first}/`))
        .map((e) => e.pid)
        .sort(),
    ).toEqual(keptPids);
    expect((await status(first)).phase).toBe('Ready');
    await undeploy(second);
  });

  it('kills an engine nobody can describe on a managed GPU, and the result and the agent log name it', async () => {
    const nodeId = nodeIds[0]!;
    const enginePort = await findFreePort();
    const intruder = spawn(
      process.execPath,
      [join(__dirname, '../../bin/llmgw.js'), 'fake-engine', '--port', String(enginePort), '--model', 'intruder'],
      {
        env: {
          PATH: process.env.PATH ?? '',
          LLMGW_NODE_ID: nodeId,
          LLMGW_SHARD_ID: 'intruder.1.r0.a1',
          LLMGW_REPLICA_ID: 'replica/intruder/1',
          CUDA_VISIBLE_DEVICES: '7',
        },
        stdio: 'ignore',
        detached: true,
      },
    );
    try {
      await eventually('the intruder runs', () => enginesOf([nodeId]).some((e) => e.pid === intruder.pid), 10_000);
      const result = await reconcile(nodeId);
      // Usually this run kills it; a registration's or the Schedule's run that surveyed the
      // node a moment earlier may have (CI saw it). Either way one run's result names it.
      const kill =
        result.actions.find((a) => a.kind === 'kill' && a.pid === intruder.pid) ??
        (await actionOfAnyRun(nodeId, (a) => a.kind === 'kill' && a.pid === intruder.pid));
      expect(kill).toMatchObject({ kind: 'kill', pid: intruder.pid, gpuIndices: [7], effective: true, reason: 'no spec describes it' });
      expect(enginesOf([nodeId]).some((e) => e.pid === intruder.pid)).toBe(false);
      expect(agents.get(nodeId)!.proc.output()).toContain(
        `killed pid ${intruder.pid} (LLMGW_SHARD_ID=intruder.1.r0.a1): no spec describes it`,
      );
    } finally {
      signalGroup(intruder.pid!, 'SIGKILL');
    }
  });

  it('takes no action the second time it reconciles the same report', async () => {
    // An operator terminates a deployment's workflows by hand: its engine runs on, described
    // by a spec, wanted by nobody.
    const orphan = uniqueId('rec-orphan');
    const view = await deploy('life', orphan, 1, 'one-gpu');
    const shard = view.replicas[0]!.shards[0]!;
    await withClient(async (client) => {
      await client.workflow.getHandle(`deployment/${orphan}`).terminate('test: lost intent');
      await client.workflow.getHandle(`replica/${orphan}/1`).terminate('test: lost intent');
    });
    const admin = connectAdmin(/admin API on (\S+)/.exec(agents.get(shard.nodeId)!.proc.output())![1]!);
    const report = (await admin.describe()).register!;
    admin.close();
    expect(report.runningShards.some((s) => s.spec?.shardId === shard.shardId)).toBe(true);

    const ids = [1, 2].map((n) => uniqueId(`reconcile/${shard.nodeId}/same-report-${n}`));
    const run = (n: number): Promise<ReconcileResult> =>
      withClient((client) =>
        client.workflow.execute('reconcileNode', {
          workflowId: ids[n - 1]!,
          taskQueue: CONTROL_TASK_QUEUE,
          args: [{ nodeId: shard.nodeId, trigger: 'test', report }],
        }),
      );
    const once = await run(1);
    recordHistory(ids[0]!, 'reconcileNode-stop-and-release', `127.0.0.1:${port}`);
    expect(once.actions.filter((a) => a.effective).map((a) => [a.kind, 'shardId' in a ? a.shardId : '', a.reason])).toEqual([
      ['stop', shard.shardId, `its replica workflow replica/${orphan}/1 has closed`],
    ]);
    expect(once.changed).toBeGreaterThan(0);
    expect(enginesOf([shard.nodeId]).some((e) => e.env.LLMGW_SHARD_ID === shard.shardId)).toBe(false);
    expect((await allocations(shard.nodeId)).some((a) => a.startsWith(`${shard.shardId}:`))).toBe(false);

    const twice = await run(2);
    expect(twice.changed).toBe(0);
    expect(twice.actions.map((a) => a.outcome)).toEqual(['already stopped']);
    // And with fresh reports, level-triggered: nothing left to do on any node.
    for (const nodeId of nodeIds) expect((await reconcile(nodeId)).changed).toBe(0);
  });

  it('stops the engine of a replica whose workflow was terminated, and its deployment marks it Failed and replaces it', async () => {
    const name = uniqueId('rec-term');
    const view = await deploy('life', name, 1, 'one-gpu');
    const shard = view.replicas[0]!.shards[0]!;
    await withClient((client) => client.workflow.getHandle(`replica/${name}/1`).terminate('test: an operator ended the wrong workflow'));
    // The deployment hears of it at once (its child closed) and replaces it; the engine, which
    // nobody stopped, is reconciliation's to stop.
    await eventually(
      'the deployment marks it Failed',
      async () => ((await status(name)).replicas.find((r) => r.seq === 1)?.phase === 'Failed' ? true : undefined),
      20_000,
    );
    expect(enginesOf([shard.nodeId]).some((e) => e.env.LLMGW_SHARD_ID === shard.shardId)).toBe(true);

    const id = uniqueId(`reconcile/${shard.nodeId}/terminated`);
    const result: ReconcileResult = await withClient((client) =>
      client.workflow.execute('reconcileNode', {
        workflowId: id,
        taskQueue: CONTROL_TASK_QUEUE,
        args: [{ nodeId: shard.nodeId, trigger: 'test' }],
      }),
    );
    recordHistory(id, 'reconcileNode-tell-deployment-of-closed-replica', `127.0.0.1:${port}`);
    const isTheStop = (a: ActionOutcome): boolean => a.kind === 'stop' && a.shardId === shard.shardId;
    const stop = result.actions.find((a) => a.effective && isTheStop(a)) ?? (await actionOfAnyRun(shard.nodeId, isTheStop));
    expect(stop).toMatchObject({
      kind: 'stop',
      reason: `its replica workflow replica/${name}/1 has closed`,
      tellDeployment: `deployment/${name}`,
    });
    expect(enginesOf([shard.nodeId]).some((e) => e.env.LLMGW_SHARD_ID === shard.shardId)).toBe(false);

    const replaced = await eventually(
      'a replacement Ready',
      async () => {
        const now = await status(name);
        return now.phase === 'Ready' && now.replicas.some((r) => r.seq === 2 && r.phase === 'Ready') ? now : undefined;
      },
      60_000,
      250,
    );
    const old = replaced.replicas.find((r) => r.seq === 1)!;
    console.log(`terminated replica: ${old.phase} (${old.reason}); replacement ${replaced.replicas.find((r) => r.seq === 2)!.endpoint}`);
    expect(old.phase).toBe('Failed');
    expect(old.reason).toMatch(/terminated|its workflow closed while shard .* still ran on .*; reconciliation stopped it/);
    await expect(routed(name)).resolves.toBe(true);
    await undeploy(name);
  });

  for (const crashAt of ['before-spawn', 'after-spawn'] as const) {
    it(`ends with exactly one engine when the agent is killed during startShard (${crashAt === 'before-spawn' ? 'spec written, engine not spawned' : 'engine spawned, activity not returned'})`, async () => {
      const nodeId = uniqueId(`rec-race-${crashAt}`);
      raceNodes.push(nodeId);
      const inventory = join(inventoryDir, 'racex8.yaml');
      const crashing = await startAgent(nodeId, inventory, { LLMGW_TEST_CRASH_AT: crashAt });
      const name = uniqueId('rec-race');
      try {
        const deploying = spawnLlmgw(['deploy', 'race', '--name', name, '--replicas', '1', '--wait', '--timeout', '120'], env);
        await crashing.waitForOutput(new RegExp(`LLMGW_TEST_CRASH_AT=${crashAt}`), 60_000);
        await crashing.exited;
        expect(enginesOf([nodeId])).toHaveLength(crashAt === 'before-spawn' ? 0 : 1);
        const restarted = await startAgent(nodeId, inventory);
        const code = await deploying.exited;
        if (code !== 0) console.log(`deploy:\n${deploying.output()}\nagent after the crash:\n${restarted.output().slice(-4000)}`);
        expect(code).toBe(0);
        const engines = enginesOf([nodeId]);
        expect(engines).toHaveLength(1);
        await sleep(3_000);
        expect(enginesOf([nodeId]).map((e) => e.pid)).toEqual(engines.map((e) => e.pid));
        expect((await status(name)).ready).toBe(1);
        await undeploy(name);
      } finally {
        // Out of the way of the next race: a stopped agent's node takes no placements.
        await agents.get(nodeId)!.proc.stop();
      }
    }, 180_000);
  }

  it('cordons, uncordons and removes a node from the CLI; remove refuses a live agent and deletes the reconcile Schedule of a gone one', async () => {
    const nodeId = uniqueId('rec-gone');
    raceNodes.push(nodeId);
    const agent = await startAgent(nodeId, join(inventoryDir, 'racex8.yaml'));
    // The node's first reconcile creates its Schedule.
    await eventually(
      'the reconcile Schedule',
      () =>
        withClient((client) =>
          client.schedule
            .getHandle(`reconcile/${nodeId}`)
            .describe()
            .then(
              () => true,
              () => false,
            ),
        ),
      30_000,
      250,
    );

    const cordoned = await runLlmgw(['nodes', 'cordon', nodeId, '--reason', 'maintenance'], env);
    expect(cordoned.code, cordoned.output).toBe(0);
    expect((await nodeView(nodeId)).cordoned).toBe(true);
    const listed = await runLlmgw(['nodes'], env);
    expect(listed.output).toMatch(new RegExp(`${nodeId}.*cordoned`));
    expect((await runLlmgw(['nodes', 'uncordon', nodeId], env)).code).toBe(0);
    expect((await nodeView(nodeId)).cordoned).toBe(false);

    const refused = await runLlmgw(['nodes', 'remove', nodeId], env);
    expect(refused.code).not.toBe(0);
    expect(refused.output).toContain(`node ${nodeId} is Ready: its agent still reports and would register again. Stop the agent first`);

    await agent.stop();
    await eventually('the node NotReady', async () => (await nodeView(nodeId)).phase !== 'Ready', 30_000, 250);
    const removed = await runLlmgw(['nodes', 'remove', nodeId], env);
    console.log(removed.output.trim());
    expect(removed.code, removed.output).toBe(0);
    expect(removed.output).toContain(`Schedule reconcile/${nodeId} deleted`);
    await withClient(async (client) => {
      expect((await client.workflow.getHandle(`node/${nodeId}`).describe()).status.name).toBe('TERMINATED');
      await expect(client.schedule.getHandle(`reconcile/${nodeId}`).describe()).rejects.toThrow(/not found/i);
    });
    expect((await runLlmgw(['nodes', '--json'], env)).output).not.toContain(nodeId);
    const again = await runLlmgw(['nodes', 'remove', nodeId], env);
    expect(again.code).not.toBe(0);
    expect(again.output).toContain(`node ${nodeId} is not registered (its workflow is TERMINATED)`);
  });
});
