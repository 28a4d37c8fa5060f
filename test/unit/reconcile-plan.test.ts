// The rules of reconciliation (workflows/reconcile/plan.ts) and the node's side of them
// (reconcileAllocations), without a server: each case is an agent's report plus what
// Temporal and the catalog say, and the plan must name the right action and reason.
// Carrying a plan out and planning again must plan nothing.
import { describe, expect, it } from 'vitest';
import { create } from '@bufbuild/protobuf';
import { RegisterSchema, UnidentifiedProcessSchema, type Register } from '../../proto/gen/llmgw/v1/register_pb.js';
import { RunningShardSchema, ShardState, ShardStatusSchema, type RunningShard } from '../../proto/gen/llmgw/v1/shard_pb.js';
import { planReconcile } from '../../workflows/reconcile/plan.js';
import { initialNodeState, reconcileAllocations, release, viewOf, type NodeState } from '../../workflows/node/state.js';
import type { ReconcileFacts, ReplicaFacts } from '../../common/reconcile-types.js';
import type { ReplicaView, ShardPlacement } from '../../common/replica-types.js';
import { fakeShardSpec } from '../helpers/shards.js';

const NODE = 'rec-a';
const NOW = '2026-12-03T10:00:00.000Z';

function running(
  deployment: string,
  seq: number,
  gpus: number[],
  options: { pid?: number; state?: ShardState; exitCode?: number } = {},
): RunningShard {
  const spec = fakeShardSpec({ nodeId: NODE, deployment, seq, gpus });
  return create(RunningShardSchema, {
    spec,
    status: create(ShardStatusSchema, {
      shardId: spec.shardId,
      replicaId: spec.replicaId,
      nodeId: NODE,
      state: options.state ?? ShardState.READY,
      pid: options.pid ?? 4000 + seq,
      httpPort: 31000 + seq,
      rank: 0,
      gpuIndices: gpus,
      ...(options.exitCode !== undefined ? { exitCode: options.exitCode } : {}),
    }),
  });
}

function report(shards: RunningShard[], unidentified: { pid: number; killed: boolean }[] = []): Register {
  return create(RegisterSchema, {
    nodeId: NODE,
    managementAddress: '127.0.0.1',
    runningShards: shards,
    unidentified: unidentified.map((u) =>
      create(UnidentifiedProcessSchema, {
        pid: u.pid,
        killed: u.killed,
        reason: 'no spec describes it',
        gpuIndices: [3],
        command: 'fake-engine',
      }),
    ),
    reportedAt: NOW,
  });
}

function placement(shard: RunningShard): ShardPlacement {
  return {
    rank: 0,
    nodeId: NODE,
    shardId: shard.spec!.shardId,
    gpuIndices: [...shard.spec!.gpuIndices],
    hcas: [],
    managementAddress: '127.0.0.1',
    httpPort: shard.status!.httpPort,
    pid: shard.status!.pid,
    // A rebuilt replica keeps the engine's placement ticket, so restarting it verifies again.
    ticket: shard.spec!.placementTicket,
  };
}

function runningReplica(shards: RunningShard[], phase: ReplicaView['phase'] = 'Ready'): ReplicaFacts {
  const replicaId = shards[0]!.spec!.replicaId;
  return {
    replica: 'running',
    deployment: 'running',
    view: {
      replicaId,
      seq: 1,
      phase,
      reason: '',
      nodes: [NODE],
      gpus: [],
      endpoint: '',
      shards: shards.map(placement),
      placements: 1,
      restarts: 0,
      since: NOW,
    },
  };
}

function nodeWith(
  allocations: { shard: RunningShard | { shardId: string; replicaId: string; gpus: number[] }; since?: string }[],
): NodeState {
  const state = initialNodeState(NODE);
  state.phase = 'Ready';
  state.allocations = allocations.map(({ shard, since }) =>
    'gpus' in shard
      ? {
          shardId: shard.shardId,
          replicaId: shard.replicaId,
          gpuIndices: shard.gpus,
          hcas: [],
          since: since ?? NOW,
          via: 'reserve' as const,
        }
      : {
          shardId: shard.spec!.shardId,
          replicaId: shard.spec!.replicaId,
          gpuIndices: [...shard.spec!.gpuIndices],
          hcas: [],
          since: since ?? NOW,
          via: 'reserve' as const,
        },
  );
  return state;
}

function facts(node: NodeState, replicas: Record<string, ReplicaFacts>, catalog: Record<string, boolean> = {}): ReconcileFacts {
  return { node: viewOf(node), replicas, catalog: { 'demo/fake-test': true, ...catalog }, drainGraceSeconds: 1, checkedAt: NOW };
}

describe('planReconcile', () => {
  it('leaves alone a shard its running replica expects and the node holds', () => {
    const shard = running('keep', 1, [0]);
    const plan = planReconcile(report([shard]), facts(nodeWith([{ shard }]), { 'replica/keep/1': runningReplica([shard]) }));
    expect(plan.actions).toEqual([]);
    expect(plan.unchanged).toEqual([shard.spec!.shardId]);
  });

  it('adopts a shard its replica expects but the node forgot: the GPUs are claimed', () => {
    const shard = running('forgot', 1, [2, 3]);
    const plan = planReconcile(report([shard]), facts(nodeWith([]), { 'replica/forgot/1': runningReplica([shard]) }));
    expect(plan.actions).toMatchObject([{ kind: 'adopt', shardId: shard.spec!.shardId, gpuIndices: [2, 3] }]);
    expect(plan.claims.map((c) => c.shardId)).toEqual([shard.spec!.shardId]);
  });

  it('rebuilds a replica and its deployment that Temporal lost, from the running spec', () => {
    const shard = running('lost', 4, [5]);
    const plan = planReconcile(report([shard]), facts(nodeWith([]), {}));
    expect(plan.actions).toHaveLength(1);
    const rebuild = plan.actions[0]!;
    expect(rebuild).toMatchObject({ kind: 'rebuild', replicaId: 'replica/lost/4', deployment: 'lost', seq: 4, rebuildDeployment: true });
    if (rebuild.kind !== 'rebuild') throw new Error('not a rebuild');
    expect(rebuild.shards).toEqual([placement(shard)]);
    expect(rebuild.snapshot).toMatchObject({
      model: 'demo',
      profile: 'fake-test',
      engine: 'fake',
      gpusPerNode: 1,
      args: ['--load-time', '1'],
    });
    expect(rebuild.reason).toMatch(/workflow is gone.*deployment\/lost/);
    expect(plan.claims.map((c) => c.shardId)).toEqual([shard.spec!.shardId]);
  });

  it('rebuilds only the replica when its deployment still runs', () => {
    const shard = running('half', 2, [1]);
    const plan = planReconcile(report([shard]), facts(nodeWith([]), { 'replica/half/2': { replica: 'missing', deployment: 'running' } }));
    expect(plan.actions).toMatchObject([{ kind: 'rebuild', rebuildDeployment: false }]);
  });

  it('stops what left the catalog, telling a running replica not to restart it, and frees its GPUs', () => {
    const shard = running('gone', 1, [0]);
    const plan = planReconcile(
      report([shard]),
      facts(nodeWith([{ shard }]), { 'replica/gone/1': runningReplica([shard]) }, { 'demo/fake-test': false }),
    );
    expect(plan.actions).toMatchObject([
      { kind: 'stop', stopReplica: true, reason: 'model demo profile fake-test is no longer in the catalog' },
    ]);
    expect(plan.releases).toEqual([shard.spec!.shardId]);
  });

  it('stops the engine of a revoked revision, telling its replica to end saying why and what to do', () => {
    const shard = running('revoked', 1, [0]);
    const why = 'revision r-0123456789 is revoked in the catalog';
    const plan = planReconcile(
      report([shard]),
      facts(nodeWith([{ shard }]), { 'replica/revoked/1': { ...runningReplica([shard]), revoked: why } }),
    );
    expect(plan.actions).toMatchObject([{ kind: 'stop', stopReplica: true, shardId: shard.spec!.shardId }]);
    expect(plan.actions[0]!.reason).toBe(
      `revoked: ${why}; its engines are stopped. Roll deployment revoked to a live revision (llmgw rollout revoked) or undeploy it`,
    );
    expect(plan.releases).toEqual([shard.spec!.shardId]);
  });

  it('stops a shard whose replica closed, one whose rank another shard serves, and one its replica does not expect', () => {
    const closed = running('closed', 1, [0]);
    const stale = running('moved', 1, [1]);
    const current = { ...placement(stale), shardId: 'moved.1.r0.a2', gpuIndices: [6] };
    const stray = running('stray', 1, [2]);
    const plan = planReconcile(
      report([closed, stale, stray]),
      facts(nodeWith([]), {
        'replica/closed/1': { replica: 'closed', deployment: 'running' },
        'replica/moved/1': { ...runningReplica([stale]), view: { ...runningReplica([stale]).view!, shards: [current] } },
        'replica/stray/1': { ...runningReplica([stray], 'Placing'), view: { ...runningReplica([stray], 'Placing').view!, shards: [] } },
      }),
    );
    expect(plan.actions.map((a) => [a.kind, a.reason])).toEqual([
      ['stop', 'its replica workflow replica/closed/1 has closed'],
      ['stop', 'rank 0 of replica/moved/1 is served by shard moved.1.r0.a2'],
      ['stop', 'replica/stray/1 (Placing) does not expect it'],
    ]);
    // Only the closed replica's deployment, still running and perhaps still counting it, is told.
    expect(plan.actions.map((a) => (a.kind === 'stop' ? a.tellDeployment : undefined))).toEqual([
      'deployment/closed',
      undefined,
      undefined,
    ]);
  });

  it('tells no deployment about a closed replica when the deployment has ended too', () => {
    const closed = running('gone', 1, [0]);
    const plan = planReconcile(report([closed]), facts(nodeWith([]), { 'replica/gone/1': { replica: 'closed', deployment: 'closed' } }));
    expect(plan.actions).toMatchObject([{ kind: 'stop', replicaId: 'replica/gone/1' }]);
    expect(plan.actions[0]).not.toHaveProperty('tellDeployment');
  });

  it('does not rebuild around an engine that already exited', () => {
    const dead = running('dead', 1, [0], { state: ShardState.FAILED, exitCode: 1 });
    const plan = planReconcile(report([dead]), facts(nodeWith([]), {}));
    expect(plan.actions).toMatchObject([{ kind: 'stop', reason: 'its engine exited and its replica workflow replica/dead/1 is gone' }]);
  });

  it('leaves a shard alone when its running replica did not answer', () => {
    const shard = running('mute', 1, [0]);
    const plan = planReconcile(report([shard]), facts(nodeWith([]), { 'replica/mute/1': { replica: 'running', deployment: 'running' } }));
    expect(plan.actions).toEqual([]);
  });

  it('frees allocations nothing holds, but not a fresh reservation of a replica that is placing', () => {
    const old = '2026-12-03T09:50:00.000Z';
    const node = nodeWith([
      { shard: { shardId: 'gone.1.r0.a1', replicaId: 'replica/gone/1', gpus: [0] } },
      { shard: { shardId: 'left.1.r0.a1', replicaId: 'replica/left/1', gpus: [1] }, since: old },
      { shard: { shardId: 'fresh.1.r0.a1', replicaId: 'replica/fresh/1', gpus: [2] } },
      { shard: { shardId: 'starting.1.r0.a1', replicaId: 'replica/starting/1', gpus: [3] }, since: old },
    ]);
    const view = (replicaId: string, shards: ShardPlacement[]): ReplicaFacts => ({
      replica: 'running',
      deployment: 'running',
      view: {
        replicaId,
        seq: 1,
        phase: 'Starting',
        reason: '',
        nodes: [],
        gpus: [],
        endpoint: '',
        shards,
        placements: 1,
        restarts: 0,
        since: NOW,
      },
    });
    const starting: ShardPlacement = {
      rank: 0,
      nodeId: NODE,
      shardId: 'starting.1.r0.a1',
      gpuIndices: [3],
      hcas: [],
      managementAddress: '',
      httpPort: 0,
      pid: 0,
    };
    const plan = planReconcile(
      report([]),
      facts(node, {
        'replica/left/1': view('replica/left/1', []),
        'replica/fresh/1': view('replica/fresh/1', []),
        'replica/starting/1': view('replica/starting/1', [starting]),
      }),
    );
    expect(plan.actions.map((a) => [a.kind, 'shardId' in a ? a.shardId : ''])).toEqual([
      ['release', 'gone.1.r0.a1'],
      ['release', 'left.1.r0.a1'],
    ]);
  });

  it('names every process the agent killed', () => {
    const plan = planReconcile(report([], [{ pid: 777, killed: true }]), facts(nodeWith([]), {}));
    expect(plan.actions).toMatchObject([{ kind: 'kill', pid: 777, gpuIndices: [3], reason: 'no spec describes it' }]);
  });

  it('plans nothing once its plan has been carried out (level-triggered)', () => {
    const kept = running('kept', 1, [0]);
    const lost = running('lost', 2, [1]);
    const node = nodeWith([{ shard: { shardId: 'orphan.1.r0.a1', replicaId: 'replica/orphan/1', gpus: [7] } }]);
    const first = planReconcile(report([kept, lost]), facts(node, { 'replica/kept/1': runningReplica([kept]) }));
    expect(first.actions.map((a) => a.kind).sort()).toEqual(['adopt', 'rebuild', 'release']);
    // Carry it out: the node's allocations, and the rebuilt replica now running.
    const changed = reconcileAllocations(node, { claims: first.claims, releases: first.releases }, NOW);
    expect(changed).toMatchObject({ claimed: [kept.spec!.shardId, lost.spec!.shardId], released: ['orphan.1.r0.a1'], conflicts: [] });
    const second = planReconcile(
      report([kept, lost]),
      facts(node, { 'replica/kept/1': runningReplica([kept]), 'replica/lost/2': runningReplica([lost]) }),
    );
    expect(second.actions).toEqual([]);
    expect(reconcileAllocations(node, { claims: second.claims, releases: second.releases }, NOW)).toMatchObject({
      claimed: [],
      released: [],
    });
  });
});

describe('reconcileAllocations', () => {
  it('gives a running engine its GPUs over a reservation nothing runs on, and says so', () => {
    const node = nodeWith([{ shard: { shardId: 'placing.1.r0.a1', replicaId: 'replica/placing/1', gpus: [0, 1] } }]);
    const result = reconcileAllocations(
      node,
      {
        claims: [{ shardId: 'real.1.r0.a1', replicaId: 'replica/real/1', gpuIndices: [1], hcas: [], since: NOW, via: 'claim' }],
        releases: [],
      },
      NOW,
    );
    expect(result.claimed).toEqual(['real.1.r0.a1']);
    expect(result.conflicts[0]).toMatch(/reserved for placing\.1\.r0\.a1.*dropped/);
    expect(node.allocations.map((a) => a.shardId)).toEqual(['real.1.r0.a1']);
  });

  it('does not claim back a shard its replica released after the report was taken', () => {
    const node = nodeWith([{ shard: { shardId: 'done.1.r0.a1', replicaId: 'replica/done/1', gpus: [2] } }]);
    release(node, 'done.1.r0.a1');
    const result = reconcileAllocations(
      node,
      {
        claims: [{ shardId: 'done.1.r0.a1', replicaId: 'replica/done/1', gpuIndices: [2], hcas: [], since: NOW, via: 'claim' }],
        releases: [],
      },
      NOW,
    );
    expect(result.claimed).toEqual([]);
    expect(result.conflicts[0]).toMatch(/released after the report/);
    expect(node.allocations).toEqual([]);
  });

  it('never hands one GPU to two reported engines', () => {
    const node = nodeWith([]);
    const claims = [
      { shardId: 'one.1.r0.a1', replicaId: 'replica/one/1', gpuIndices: [4], hcas: [], since: NOW, via: 'claim' as const },
      { shardId: 'two.1.r0.a1', replicaId: 'replica/two/1', gpuIndices: [4], hcas: [], since: NOW, via: 'claim' as const },
    ];
    const result = reconcileAllocations(node, { claims, releases: [] }, NOW);
    expect(result.claimed).toEqual(['one.1.r0.a1']);
    expect(result.conflicts).toHaveLength(1);
    expect(node.allocations.filter((a) => a.gpuIndices.includes(4))).toHaveLength(1);
  });
});
