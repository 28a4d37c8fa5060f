// A namespace member cannot free a live engine's GPUs or stop it (issue 37), on the reconciliation
// stack (its own dev server, a worker, two agents, a router): they send the node workflow a
// `release` of the engine's shard (no proof, then a well-formed proof the control worker did not
// make) and schedule `stopShard` on the agent's queue from a workflow on a worker of their own.
// The node keeps the GPUs allocated and the engine keeps its pid; an undeploy (the control
// worker's MAC'd release, the replica's own stop) still frees the GPUs and ends the engine.
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { create } from '@bufbuild/protobuf';
import { temporal } from '@temporalio/proto';
import { releaseUpdate } from '../../workflows/definitions.js';
import { StopShardSchema } from '../../proto/gen/llmgw/v1/shard_pb.js';
import type { NodeView } from '../../common/node-types.js';
import { enginesOf, eventually, sleep } from '../helpers/processes.js';
import { uniqueId } from '../helpers/temporal.js';
import { useAttackerOnReconcileStack } from '../helpers/attacker-worker.js';
import { deploy, nodeView, routed, status, undeploy, withClient } from '../helpers/reconcile-stack.js';

// The attacker's worker: agentCall (one agent activity on any `agent/<node>` queue), bundled alone.
const attackerQueue = useAttackerOnReconcileStack(join(__dirname, '../workflows/agent-calls.ts'));

/** What an Update or workflow failed with, all causes' messages joined. */
function failureText(error: unknown): string {
  const parts: string[] = [];
  for (let e = error as { message?: string; cause?: unknown } | undefined; e && parts.length < 6; e = e.cause as typeof e)
    parts.push(e.message ?? String(e));
  return parts.join(' <- ');
}

describe('forged GPU Updates and stops', () => {
  const name = uniqueId('forged');
  let shard: { replicaId: string; shardId: string; nodeId: string; gpuIndices: number[]; pid: number };
  const held = (view: NodeView): boolean =>
    view.allocations.some((a) => a.shardId === shard.shardId && a.gpuIndices.join() === shard.gpuIndices.join());
  const engineAlive = (): boolean => enginesOf([shard.nodeId]).some((e) => e.pid === shard.pid);

  beforeAll(async () => {
    const view = await deploy('life', name, 1, 'one-gpu');
    const replica = view.replicas[0]!;
    const leader = replica.shards[0]!;
    shard = {
      replicaId: replica.replicaId,
      shardId: leader.shardId,
      nodeId: leader.nodeId,
      gpuIndices: [...leader.gpuIndices],
      pid: leader.pid,
    };
    expect(shard.pid).toBeGreaterThan(0);
    expect(held(await nodeView(shard.nodeId))).toBe(true);
    expect(engineAlive()).toBe(true);
  });

  it("a release of a live engine's shard without the control worker's MAC is refused, and its GPUs stay allocated", async () => {
    const handle = (client: Parameters<Parameters<typeof withClient>[0]>[0]) => client.workflow.getHandle(`node/${shard.nodeId}`);
    const bare = await withClient((client) => handle(client).executeUpdate(releaseUpdate, { args: [{ shardId: shard.shardId }] })).catch(
      (error: unknown) => error,
    );
    expect(failureText(bare)).toMatch(/release on node .* refused.*carries no proof/);
    // Well-formed, the right shape and expiry, made with no key the control worker holds.
    const forgedProof = `v1.000000000000.${Date.now() + 60_000}.${Buffer.alloc(32, 7).toString('base64url')}`;
    const forged = await withClient((client) =>
      handle(client).executeUpdate(releaseUpdate, { args: [{ shardId: shard.shardId, proof: forgedProof }] }),
    ).catch((error: unknown) => error);
    expect(failureText(forged)).toMatch(/release on node .* refused.*key 000000000000, which this control worker does not hold/);
    const malformed = await withClient((client) =>
      handle(client).executeUpdate(releaseUpdate, { args: [{ shardId: shard.shardId, proof: 'trust me' }] }),
    ).catch((error: unknown) => error);
    expect(failureText(malformed)).toMatch(/not a v1 node-request MAC/);
    for (let i = 0; i < 6; i++) {
      expect(held(await nodeView(shard.nodeId)), 'the engine keeps its allocation').toBe(true);
      await sleep(250);
    }
  });

  it("stopShard scheduled on the agent's queue by a workflow of the attacker's is refused, and the engine keeps its pid", async () => {
    const stop = create(StopShardSchema, { shardId: shard.shardId, replicaId: shard.replicaId, graceSeconds: 1, reason: 'forged' });
    const failure = await withClient((client) =>
      client.workflow.execute('agentCall', {
        taskQueue: attackerQueue,
        workflowId: uniqueId('attacker-stop'),
        args: [shard.nodeId, 'stopShard', stop],
      }),
    ).catch((error: unknown) => error);
    expect(failureText(failure)).toMatch(/stop refused: shard .* only that replica .* or reconcileNode on llmgw may stop it/);
    for (let i = 0; i < 6; i++) {
      expect(engineAlive(), `engine pid ${shard.pid} still runs`).toBe(true);
      await sleep(250);
    }
    expect((await status(name)).phase).toBe('Ready');
    expect(await routed(name)).toBe(true);
  });

  it('an undeploy still frees the GPUs (a MAC’d release) and stops the engine (the replica’s own stop)', async () => {
    await undeploy(name);
    await eventually(
      'the engine stopped and its GPUs freed',
      async () => (!engineAlive() && !held(await nodeView(shard.nodeId)) ? true : undefined),
      60_000,
    );
    // What a checked release costs the node's history: the events from its acceptance to its completion.
    const history = await withClient((client) => client.workflow.getHandle(`node/${shard.nodeId}`).fetchHistory());
    const events = history.events ?? [];
    // The undeploy's: the last release of the shard (the first forged one was accepted, then refused).
    const isOurs = (e: (typeof events)[number]): boolean => {
      const request = e.workflowExecutionUpdateAcceptedEventAttributes?.acceptedRequest;
      const arg = request?.input?.args?.payloads?.[0]?.data;
      return request?.input?.name === 'release' && arg != null && Buffer.from(arg).toString('utf8').includes(shard.shardId);
    };
    const accepted = events.length - 1 - [...events].reverse().findIndex(isOurs);
    expect(accepted).toBeLessThan(events.length);
    const updateId = events[accepted]!.workflowExecutionUpdateAcceptedEventAttributes!.acceptedRequest!.meta!.updateId;
    const completed = events.findIndex((e) => e.workflowExecutionUpdateCompletedEventAttributes?.meta?.updateId === updateId);
    const between = events.slice(accepted + 1, completed);
    const markers = between.filter((e) => e.markerRecordedEventAttributes);
    console.log(
      `a checked release: ${between.length} event(s) between its acceptance and completion (${between.map((e) => temporal.api.enums.v1.EventType[e.eventType ?? 0]).join(', ')}), ${markers.length} marker(s)`,
    );
    expect(markers).toHaveLength(1);
  });
});
