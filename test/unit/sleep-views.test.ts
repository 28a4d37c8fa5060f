// What a sleeping replica means to everyone who reads its phase, without a server: when the
// replica refuses a sleep or a wake (sleep-rules.ts), how its deployment counts it (up, neither
// ready nor failed; drained first, longest asleep first), how the routes workflow keeps its route
// (in the table with its endpoint and signature, not routable) and what `llmgw status` shows.
import { askAgainAt } from '../../activities/shared-gpus.js';
import { describe, expect, it } from 'vitest';
import type { ProfileSnapshot, ReplicaPhase } from '../../common/replica-types.js';
import type { SleepPolicy } from '../../common/sleep-types.js';
import { sleepRefusal, wakeRefusal } from '../../workflows/replica/sleep-rules.js';
import type { ReplicaState } from '../../workflows/replica/state.js';
import {
  deploymentPhase,
  deploymentReason,
  drainVictims,
  type DeploymentState,
  type TrackedReplica,
} from '../../workflows/deploy-model/state.js';
import { applyRoute, droppedEverywhere, initialRoutesState } from '../../workflows/routes/state.js';
import { stateCell } from '../../cli/actions/deployment-view.js';
import { replicaDetails } from '../../workflows/replica/details.js';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Client } from '@temporalio/client';
import { trueRoute } from '../../activities/route-signing.js';
import { ensureCatalogKeyFile, readCatalogKeys } from '../../common/catalog-key.js';
import { signPlacementTicket } from '../../common/placement-ticket.js';
import { asActivityOf, fakeReplicaClient } from '../helpers/replica-fakes.js';
import { demoTicket } from '../helpers/tickets.js';

const POLICY: SleepPolicy = { afterSeconds: 300, level: 1, minAwakeSeconds: 60 };
const NOW = Date.parse('2026-12-06T12:00:00Z');

function asking(phase: ReplicaPhase, options: { policy?: SleepPolicy | null; lastWakeAgoS?: number; handOver?: boolean } = {}) {
  const state = {
    phase,
    reason: 'why',
    since: '2026-12-06T11:00:00Z',
    stopReason: undefined,
    ...(options.lastWakeAgoS !== undefined
      ? { sleep: { lastWake: { at: new Date(NOW - options.lastWakeAgoS * 1000).toISOString(), by: 'router:r1', tookMs: 800 } } }
      : {}),
  } as unknown as ReplicaState;
  const policy = options.policy === null ? undefined : (options.policy ?? POLICY);
  return {
    replicaId: 'replica/demo/1',
    profile: { profile: 'p', ...(policy ? { sleep: policy } : {}) } as unknown as ProfileSnapshot,
    state,
    sleep: {},
    stopRequested: () => false,
    handOverDue: () => options.handOver === true,
  };
}

describe('who may put a replica to sleep, or wake it', () => {
  it('sleeps only a Ready replica of a profile with a sleep policy', () => {
    expect(sleepRefusal(asking('Ready'), { by: 'cli:ops' }, NOW)).toBeUndefined();
    expect(sleepRefusal(asking('Ready', { policy: null }), { by: 'cli:ops' }, NOW)).toMatch(/no sleep policy/);
    expect(sleepRefusal(asking('Loading'), { by: 'cli:ops' }, NOW)).toMatch(/Loading, not Ready/);
    expect(sleepRefusal(asking('Unknown'), { by: 'cli:ops' }, NOW)).toMatch(/Unknown, not Ready/);
    expect(sleepRefusal(asking('Sleeping'), { by: 'cli:ops' }, NOW)).toMatch(/asleep already/);
    expect(sleepRefusal(asking('Ready'), { by: '' }, NOW)).toMatch(/who asks/);
    expect(sleepRefusal(asking('Ready'), { by: 'x', level: 3 as 1 }, NOW)).toMatch(/level must be 1 or 2/);
    expect(sleepRefusal(asking('Ready', { handOver: true }), { by: 'x' }, NOW)).toMatch(/handing over/);
  });

  it('keeps a replica just woken awake for minAwakeSeconds, unless forced', () => {
    expect(sleepRefusal(asking('Ready', { lastWakeAgoS: 10 }), { by: 'autoscaler' }, NOW)).toMatch(
      /woken 10 s ago \(by router:r1\).*at least 60 s \(minAwakeSeconds\).*after 2026-12-06T12:00:50.000Z, or with force/,
    );
    // A replica waking onto its GPU reads from the refusal when to ask again (activities/shared-gpus.ts).
    expect(askAgainAt(sleepRefusal(asking('Ready', { lastWakeAgoS: 10 }), { by: 'replica:replica/b/1' }, NOW)!)).toBe(
      '2026-12-06T12:00:50.000Z',
    );
    expect(sleepRefusal(asking('Ready', { lastWakeAgoS: 10 }), { by: 'cli:ops', force: true }, NOW)).toBeUndefined();
    expect(sleepRefusal(asking('Ready', { lastWakeAgoS: 61 }), { by: 'autoscaler' }, NOW)).toBeUndefined();
  });

  it('wakes a sleeping replica, answers an awake one, and refuses one not up or stopping', () => {
    expect(wakeRefusal(asking('Sleeping'), { by: 'router:r1' })).toBeUndefined();
    expect(wakeRefusal(asking('Ready'), { by: 'router:r1' })).toBeUndefined();
    expect(wakeRefusal(asking('Unknown'), { by: 'router:r1' })).toBeUndefined();
    expect(wakeRefusal(asking('Starting'), { by: 'router:r1' })).toMatch(/serves once Ready, without a wake/);
    expect(wakeRefusal(asking('Draining'), { by: 'router:r1' })).toMatch(/stopping.*starts another/);
    expect(wakeRefusal(asking('Sleeping', { handOver: true }), { by: 'router:r1' })).toMatch(/handing over/);
  });
});

function replica(seq: number, phase: ReplicaPhase, asleepSince?: string): TrackedReplica {
  return {
    replicaId: `replica/demo/${seq}`,
    seq,
    phase,
    reason: '',
    nodes: [],
    gpus: [],
    endpoint: 'http://10.0.0.1:8000',
    shards: [],
    placements: 1,
    restarts: 0,
    since: asleepSince ?? '2026-12-06T10:00:00Z',
    stopping: false,
    ...(asleepSince ? { sleep: { since: asleepSince, level: 1 } } : {}),
  };
}

function deployment(replicas: TrackedReplica[], desired = replicas.length): DeploymentState {
  return {
    name: 'demo',
    desired,
    replicas: Object.fromEntries(replicas.map((r) => [r.replicaId, r])),
    undeploying: false,
    failureTimes: [],
  } as unknown as DeploymentState;
}

describe('a deployment whose replicas sleep', () => {
  it('is Sleeping when every replica it wants sleeps, Ready when one is awake, never Degraded for it', () => {
    const all = deployment([replica(1, 'Sleeping', '2026-12-06T11:00:00Z'), replica(2, 'Sleeping', '2026-12-06T11:30:00Z')]);
    expect(deploymentPhase(all)).toBe('Sleeping');
    expect(deploymentReason(all)).toBe('2 sleeping (a request wakes them)');
    expect(deploymentPhase(deployment([replica(1, 'Ready'), replica(2, 'Sleeping', '2026-12-06T11:00:00Z')]))).toBe('Ready');
    expect(deploymentPhase(deployment([replica(1, 'Sleeping', '2026-12-06T11:00:00Z'), replica(2, 'Loading')]))).toBe('Progressing');
  });

  it('stops the replicas not up first, then the one asleep longest, then Ready ones', () => {
    const serving = [
      replica(1, 'Loading'),
      replica(2, 'Sleeping', '2026-12-06T11:00:00Z'),
      replica(3, 'Sleeping', '2026-12-06T11:30:00Z'),
      replica(4, 'Ready'),
    ];
    expect(drainVictims(serving, 3).map((r) => r.seq)).toEqual([1]);
    expect(drainVictims(serving, 2).map((r) => r.seq)).toEqual([1, 2]);
    expect(drainVictims(serving, 1).map((r) => r.seq)).toEqual([1, 2, 3]);
  });
});

describe("a sleeping replica's route", () => {
  it('stays in the table with its endpoint and signature, but is not routable', () => {
    const s = initialRoutesState('e1');
    const route = { replicaId: 'replica/demo/1', deployment: 'demo', servedName: 'demo', endpoint: 'http://10.0.0.1:8000' };
    applyRoute(s, { ...route, phase: 'Ready', signature: 'sig' });
    expect(s.routableSince['replica/demo/1']).toBeDefined();
    expect(applyRoute(s, { ...route, phase: 'Sleeping', signature: 'sig' })).toBe(true);
    expect(s.routes).toEqual([{ ...route, phase: 'Sleeping', signature: 'sig' }]);
    expect(s.routableSince['replica/demo/1']).toBeUndefined();
    // A drain of a sleeping replica waits for nothing more: routers dropped it when it fell asleep.
    expect(droppedEverywhere(s, 'replica/demo/1', 0)).toBe(true);
  });
});

describe('llmgw status', () => {
  it('shows Sleeping with its level and since when, and the last wake with its duration', () => {
    expect(stateCell({ phase: 'Sleeping', sleep: { since: '2026-12-06T11:00:05.000Z', level: 2 } })).toBe(
      'Sleeping (level 2, since 11:00:05)',
    );
    expect(stateCell({ phase: 'Ready', sleep: { lastWake: { at: '2026-12-06T11:02:00.000Z', by: 'router:r1', tookMs: 840 } } })).toBe(
      'Ready\nlast wake 840 ms at 11:02:00 (router:r1)',
    );
    expect(stateCell({ phase: 'Ready' })).toBe('Ready');
  });
});

describe("the Web UI's details of a replica", () => {
  it('show the same: asleep since when at which level, the last wake, and the policy', () => {
    const profile = {
      model: 'm',
      profile: 'p',
      engine: 'vllm',
      tensorParallel: 1,
      pipelineParallel: 1,
      nodes: 1,
      gpusPerNode: 1,
      gpuClass: 'H100',
    };
    const details = replicaDetails(
      'replica/demo/1',
      { ...profile, sleep: { ...POLICY, stopAfterSeconds: 3600 } } as unknown as ProfileSnapshot,
      {
        phase: 'Sleeping',
        since: '2026-12-06T11:00:05.000Z',
        reason: 'asleep',
        placements: 1,
        restarts: 0,
        avoidNodes: [],
        shards: [],
        sleep: { since: '2026-12-06T11:00:05.000Z', level: 1, lastWake: { at: '2026-12-06T10:00:00.000Z', by: 'router:r1', tookMs: 840 } },
      },
    );
    expect(details).toContain('asleep since 2026-12-06T11:00:05.000Z at level 1');
    expect(details).toContain('last woken 2026-12-06T10:00:00.000Z by router:r1 in 840 ms');
    expect(details).toContain('sleep policy: level 1 after 300 s idle, awake at least 60 s, stopped after 3600 s asleep');
  });
});

describe("the route signer and a sleeping replica's route", () => {
  it('signs it with its endpoint, as it signed it Ready, so that routers keep it to wake it', async () => {
    const keyFile = join(mkdtempSync(join(tmpdir(), 'llmgw-sleep-route-')), 'catalog.key');
    ensureCatalogKeyFile(keyFile);
    const ticket = signPlacementTicket(demoTicket({ placedByRun: 'chain-a', chain: 'chain-a' }), readCatalogKeys(keyFile));
    const base = fakeReplicaClient('chain-a', [{ shardId: 'demo.1.r0.a1', nodeId: 'gpu-1', rank: 0, ticket }]);
    // The same replica, asleep: its status query says Sleeping.
    const asleep = {
      workflow: {
        getHandle: (id: string) => {
          const handle = base.workflow.getHandle(id) as unknown as { query: () => Promise<Record<string, unknown>> };
          if (id.startsWith('deployment/')) return handle;
          return { ...handle, query: async () => ({ ...(await handle.query()), phase: 'Sleeping' }) };
        },
      },
    } as unknown as Client;
    const entry = { replicaId: 'replica/demo/1', deployment: 'demo', servedName: 'demo', endpoint: '', phase: 'Sleeping' as const };
    const verdict = await asActivityOf('chain-a', () => trueRoute(asleep, entry, keyFile, { trustUnenrolled: true }));
    expect(verdict).toMatchObject({
      route: { phase: 'Sleeping', endpoint: 'http://198.18.0.7:8000', chain: 'chain-a', signature: expect.any(String) },
    });
  });
});
