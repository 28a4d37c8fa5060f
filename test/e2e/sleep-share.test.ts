// GPUs shared by sleepers end to end (issue 38, docs/sleep.md "Sharing GPUs"): a simulated host
// with one GPU that fits one awake fake engine, a real control worker and router. Model A is put
// to sleep; model B is then placed on the same GPU and serves; a request for A puts B to sleep
// first (the node refused A's wake and named B), then A wakes and answers. The node's history,
// replayed (common/placement/awake-audit.ts), never has both awake, and no engine ever hit the
// simulated CUDA out-of-memory; a forged `awake` Update changes nothing; a sharer waiting for
// room is woken when a share is given back. Own GPU class (SLEEPSHARE) and dev server: parallel-safe.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client } from '@temporalio/client';
import { payloadConverter } from '../../common/payload-converter.js';
import { auditAwake, type CompletedUpdate } from '../../common/placement/awake-audit.js';
import { findFreePort } from '../../common/ports.js';
import type { DeploymentView, ReplicaView } from '../../common/replica-types.js';
import {
  awakeUpdate,
  deploymentStatusQuery,
  describeNodeQuery,
  replicaStatusQuery,
  sleepReplicaUpdate,
} from '../../workflows/definitions.js';
import { eventually, inventory, runLlmgw, spawnLlmgw, undeployAndWait, uniqueId, useIsolatedFleet } from '../helpers/fleet.js';

const fleet = useIsolatedFleet({ ownTemporal: 'sleep-share' });
let client: Client;
let agentMetrics = '';
let stateDir = '';
const nodeId = uniqueId('share');
const nameA = uniqueId('share-a');
const nameB = uniqueId('share-b');
const nameC = uniqueId('share-c');
let routerBase = '';

async function replicaOf(name: string): Promise<ReplicaView> {
  const view = await client.workflow.getHandle(`deployment/${name}`).query<DeploymentView>(deploymentStatusQuery);
  const live = view.replicas.find((r) => r.phase !== 'Stopped' && r.phase !== 'Failed');
  if (!live) throw new Error(`${name} has no live replica`);
  return client.workflow.getHandle(live.replicaId).query(replicaStatusQuery);
}

async function ask(model: string): Promise<{ status: number; text: string }> {
  const res = await fetch(`${routerBase}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model, max_tokens: 8, messages: [{ role: 'user', content: 'hello' }] }),
  });
  const body = (await res.json()) as { choices?: Array<{ message?: { content?: string } }> };
  return { status: res.status, text: body.choices?.[0]?.message?.content ?? '' };
}

/** The node's completed Updates, in history order, decoded: what the audit replays. */
async function nodeUpdates(): Promise<CompletedUpdate[]> {
  const { events } = await client.workflow.getHandle(`node/${nodeId}`).fetchHistory();
  const accepted = new Map<string, { name: string; request: unknown }>();
  const completed: CompletedUpdate[] = [];
  for (const event of events ?? []) {
    const a = event.workflowExecutionUpdateAcceptedEventAttributes;
    if (a?.acceptedRequest?.meta?.updateId) {
      const input = a.acceptedRequest.input;
      accepted.set(a.acceptedRequest.meta.updateId, {
        name: input?.name ?? '',
        request: input?.args?.payloads?.[0] ? payloadConverter.fromPayload(input.args.payloads[0]) : undefined,
      });
    }
    const c = event.workflowExecutionUpdateCompletedEventAttributes;
    const asked = c?.meta?.updateId ? accepted.get(c.meta.updateId) : undefined;
    const success = c?.outcome?.success?.payloads?.[0];
    if (asked && success) completed.push({ ...asked, result: payloadConverter.fromPayload(success), eventId: Number(event.eventId) });
  }
  return completed;
}

/** The value of `name`'s series whose labels include `labels` (as Prometheus writes them), summed. */
function series(text: string, name: string, labels: string): number {
  return text
    .split('\n')
    .filter((line) => line.startsWith(`${name}{`) || line.startsWith(`${name} `))
    .filter((line) => labels.split(',').every((label) => label === '' || line.includes(label)))
    .reduce((sum, line) => sum + Number(line.split(' ').pop()), 0);
}

/** Every line an engine on this host logged that says the simulated GPU was out of memory. */
function outOfMemoryLines(dir: string): string[] {
  const found: string[] = [];
  const walk = (path: string): void => {
    for (const entry of readdirSync(path)) {
      const full = join(path, entry);
      if (statSync(full).isDirectory()) walk(full);
      else if (entry.endsWith('.log'))
        found.push(
          ...readFileSync(full, 'utf8')
            .split('\n')
            .filter((l) => /out of memory/i.test(l)),
        );
    }
  };
  walk(dir);
  return found;
}

describe('GPUs shared by sleepers', () => {
  beforeAll(async () => {
    client = fleet.client;
    agentMetrics = `127.0.0.1:${await findFreePort()}`;
    ({ stateDir } = await fleet.agent(nodeId, { inventory: inventory('sleepsharex1.yaml'), extra: ['--metrics-addr', agentMetrics] }));
    const port = await findFreePort();
    const router = spawnLlmgw(['router', '--host', '127.0.0.1', '--port', String(port)]);
    await router.waitForOutput(/listening on http/, 60_000);
    routerBase = `http://127.0.0.1:${port}`;
  }, 180_000);

  // All at once: each waits until no engine is left on the host.
  afterAll(() => Promise.all([nameA, nameB, nameC].map((name) => undeployAndWait(client, name, [nodeId]).catch(() => undefined))));

  it('places B on the GPU where A sleeps, and wakes A for a request by putting B to sleep first', async () => {
    const deployedA = await runLlmgw(['deploy', 'share-a', '--name', nameA, '--replicas', '1', '--wait']);
    expect(deployedA.code, deployedA.output).toBe(0);
    const a = await replicaOf(nameA);
    await client.workflow.getHandle(a.replicaId).executeUpdate(sleepReplicaUpdate, { args: [{ by: 'test' }] });

    // The only GPU is A's, but A sleeps: B may share it, and serves.
    const deployedB = await runLlmgw(['deploy', 'share-b', '--name', nameB, '--replicas', '1', '--wait']);
    expect(deployedB.code, deployedB.output).toBe(0);
    const b = await replicaOf(nameB);
    expect(b.phase).toBe('Ready');
    expect(b.shards.map((s) => [s.nodeId, s.gpuIndices])).toEqual(a.shards.map((s) => [s.nodeId, s.gpuIndices]));
    expect((await ask('share-b')).status).toBe(200);

    // A request for A: the node has no room for A awake, so B is asked to sleep, then A wakes.
    const answer = await ask('share-a');
    expect(answer.status).toBe(200);
    expect(answer.text).not.toBe('');
    const woken = await eventually(
      'A Ready',
      async () => ((await replicaOf(nameA)).phase === 'Ready' ? replicaOf(nameA) : undefined),
      30_000,
    );
    expect(woken.sleep?.lastWake?.by).toMatch(/^router:/);
    const asleep = await replicaOf(nameB);
    expect(asleep.phase).toBe('Sleeping');
    expect(asleep.reason).toContain(`replica:${a.replicaId}`);

    // Afterwards, from the node's history alone: never both awake on the GPU.
    const updates = await nodeUpdates();
    const audit = auditAwake(updates);
    console.log(`node history: ${updates.length} Updates, ${audit.moments} moments checked, most awake on the GPU ${audit.maxLoad}`);
    expect(audit.violations).toEqual([]);
    expect(audit.maxLoad).toBeLessThanOrEqual(1);
    // The node refused A's first wake while B was awake, and granted it once B slept.
    const permits = updates.filter((u) => u.name === 'awake' && (u.request as { awake: boolean }).awake);
    expect(permits.map((u) => (u.result as { ok: boolean }).ok)).toEqual([false, true]);
    // And the simulated GPU never ran out of memory: no start or wake failed as CUDA would.
    expect(outOfMemoryLines(stateDir)).toEqual([]);
    // The agent counts what its engines did: A and B put to sleep at level 1, A woken once.
    const scraped = await (await fetch(`http://${agentMetrics}/metrics`)).text();
    expect(series(scraped, 'llmgw_agent_engine_sleeps', 'level="1",result="asleep"')).toBe(2);
    expect(series(scraped, 'llmgw_agent_engine_wakes', 'result="woken"')).toBe(1);
    expect(series(scraped, 'llmgw_agent_engine_wake_latency_count', '')).toBe(1);

    // Only the control worker gives a share back: a namespace member's `awake: false` for A (which
    // would let B wake onto a full GPU) is refused, with no proof or with one it did not make.
    const node = client.workflow.getHandle(`node/${nodeId}`);
    const shardA = a.shards[0]!.shardId;
    const forgedProof = `v1.000000000000.${Date.now() + 60_000}.${Buffer.alloc(32, 7).toString('base64url')}`;
    for (const proof of [undefined, forgedProof]) {
      const refused = await node
        .executeUpdate(awakeUpdate, { args: [{ shardId: shardA, awake: false, ...(proof ? { proof } : {}) }] })
        .then(() => 'accepted')
        .catch((error: unknown) => String(error instanceof Error && error.cause instanceof Error ? error.cause.message : error));
      expect(refused).toMatch(/awake on node .* refused/);
    }
    const held = (await node.query(describeNodeQuery)).allocations.map((x) => [x.replicaId, x.asleep]);
    expect(held).toEqual(
      expect.arrayContaining([
        [a.replicaId, false],
        [b.replicaId, true],
      ]),
    );
  }, 240_000);

  it('places a sharer that waits for room as soon as the awake one gives its share back', async () => {
    // A is awake (0.9 of the GPU), B asleep: C, able to sleep too, does not fit and waits.
    const deployedC = await runLlmgw(['deploy', 'share-a', '--name', nameC, '--replicas', '1']);
    expect(deployedC.code, deployedC.output).toBe(0);
    const waiting = await eventually('C Unschedulable', async () => {
      const c = await replicaOf(nameC).catch(() => undefined);
      return c?.phase === 'Unschedulable' ? c : undefined;
    });
    const a = await replicaOf(nameA);
    // Woken a moment ago (minAwakeSeconds 30): only an operator who means it puts it to sleep now.
    await client.workflow.getHandle(a.replicaId).executeUpdate(sleepReplicaUpdate, { args: [{ by: 'test', force: true }] });
    const placed = await eventually(
      'C Ready',
      async () => ((await replicaOf(nameC)).phase === 'Ready' ? replicaOf(nameC) : undefined),
      60_000,
    );
    expect(placed.shards.map((s) => s.gpuIndices)).toEqual([[0]]);
    // It was woken by the share given back (a capacityChanged signal), not found at a later look.
    const { events } = await client.workflow.getHandle(waiting.replicaId).fetchHistory();
    const signals = (events ?? []).map((e) => e.workflowExecutionSignaledEventAttributes?.signalName).filter(Boolean);
    expect(signals).toContain('capacityChanged');
    expect(outOfMemoryLines(stateDir)).toEqual([]);
    expect(auditAwake(await nodeUpdates()).violations).toEqual([]);
  }, 120_000);
});
