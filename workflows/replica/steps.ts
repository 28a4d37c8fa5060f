// The replica as a table of steps: each step is one function that does its work and returns
// the next step; the loop below is the only place that moves from one to the next, and the
// only place that continues as new. Adding a phase is one entry here, its step's file, and
// its name in REPLICA_PHASES (docs/architecture.md, "Adding a replica phase"). Workflow side.
import { allHandlersFinished, condition } from '@temporalio/workflow';
import type { ReplicaPhase, ReplicaView } from '../../common/replica-types.js';
import type { ReplicaContext } from './context.js';
import { drain, release } from './drain.js';
import { fetchWeights } from './fetch.js';
import { place } from './place.js';
import { recover, type Failure } from './recovery.js';
import { adoptedAsleep, fallAsleep, settleSleepRequests, stayAsleep } from './sleep.js';
import { awaitHealthy, renewTickets, startAndWait } from './start.js';
import { endpointOf, type Outcome, type ReplicaState } from './state.js';
import { watchReady } from './watch.js';

/** Where a replica goes next; a hand-over carries the step the next run resumes with. */
export type Next =
  | { step: 'place'; reason?: string }
  | { step: 'fetch' }
  | { step: 'start' }
  | { step: 'checkAdopted' }
  | { step: 'watch'; keepUnknown?: boolean }
  | { step: 'sleep' }
  | { step: 'asleep' }
  | { step: 'recover'; failure: Failure }
  | { step: 'release'; reason: string; phase: 'Placing' | 'Starting' | 'Draining'; then: Next }
  | { step: 'drain' }
  | { step: 'handOver'; resume: Next }
  | { step: 'done'; phase: Extract<ReplicaPhase, 'Stopped' | 'Failed'>; reason: string };

export type StepName = Next['step'];
type Step<K extends StepName> = (ctx: ReplicaContext, next: Extract<Next, { step: K }>) => Promise<Next>;

/** After a start or a health check: Ready, stopped, or something to recover from. */
function afterStart(outcome: Outcome | 'ready'): Next {
  if (outcome === 'ready') return { step: 'watch' };
  return outcome.kind === 'stop' ? { step: 'drain' } : { step: 'recover', failure: outcome };
}

export const STEPS: { [K in Exclude<StepName, 'handOver' | 'done'>]: Step<K> } = {
  async place(ctx, next) {
    if (next.reason) void ctx.setPhase('Placing', next.reason);
    return place(ctx);
  },
  // Weights onto the hosts it was placed on, once per host (workflows/replica/fetch.ts).
  async fetch(ctx) {
    const fetched = await fetchWeights(ctx);
    return fetched === 'fetched' ? { step: 'start' } : afterStart(fetched);
  },
  start: async (ctx) => afterStart(await startAndWait(ctx)),
  // Rebuilt by reconciliation around engines that never stopped: check they serve, and
  // restart them only if they do not.
  async checkAdopted(ctx) {
    const pids = ctx.state.shards.map((s) => `rank ${s.rank} pid ${s.pid} on ${s.nodeId}`).join(', ');
    // Their tickets name the chain that started them: this one's routes need its own.
    const refused = await renewTickets(ctx);
    if (refused) return afterStart(refused);
    // The health check comes first, asleep or not: a sleeping engine answers /health (it wakes
    // nothing), and the agent's answer carries its attestation of the endpoint for this chain,
    // without which no route of this replica is signed, asleep or once woken.
    const healthy = await awaitHealthy(ctx, `adopted running engines (${pids}); checking the leader's health`);
    // An engine left asleep is adopted asleep: its route must stay one that holds requests
    // (docs/sleep.md, "The replica").
    if (healthy === 'ready' && (await adoptedAsleep(ctx))) return { step: 'asleep' };
    return afterStart(healthy);
  },
  async watch(ctx, next) {
    ctx.state.restartsHere = 0;
    // A run continued while Unknown stays Unknown until its node says otherwise.
    if (!next.keepUnknown) void ctx.setPhase('Ready', `serving at ${endpointOf(ctx.state.shards)}`);
    const outcome = await watchReady(ctx);
    if (outcome === 'sleep') return { step: 'sleep' };
    if (outcome === 'handOver') return { step: 'handOver', resume: { step: 'watch', keepUnknown: ctx.state.phase === 'Unknown' } };
    return outcome.kind === 'stop' ? { step: 'drain' } : { step: 'recover', failure: outcome };
  },
  // Engines to sleep, and asleep until a wake, a stop or a failure (sleep.ts).
  sleep: fallAsleep,
  asleep: stayAsleep,
  recover,
  release,
  drain,
};

/** Steps that a stop request cuts short: the replica drains instead. */
const STOPPABLE: ReadonlySet<StepName> = new Set(['place', 'fetch', 'start', 'checkAdopted', 'watch', 'sleep', 'asleep']);

/** Where a run begins: a fresh start, engines to adopt, or where its predecessor handed over. */
export function firstStep(state: ReplicaState, started: { carried: boolean; adopting: boolean }): Next {
  if (started.carried && state.resume) return state.resume;
  if (started.carried) {
    // State carried by a release whose runs did not record their step.
    if (state.stopReason !== undefined) return { step: 'drain' };
    if (state.shards.length && state.phase === 'Sleeping') return { step: 'asleep' };
    if (state.shards.length && (state.phase === 'Ready' || state.phase === 'Unknown'))
      return { step: 'watch', keepUnknown: state.phase === 'Unknown' };
    return state.shards.length ? { step: 'start' } : { step: 'place' };
  }
  return started.adopting ? { step: 'checkAdopted' } : { step: 'place' };
}

/**
 * Runs the steps from `first` until the replica is done, or hands over to a new run (which
 * never returns). Returns the final view once the deployment has heard the final phase.
 */
export async function runSteps(ctx: ReplicaContext, first: Next): Promise<ReplicaView> {
  let next = first;
  for (;;) {
    if (ctx.stopRequested() && STOPPABLE.has(next.step)) next = { step: 'drain' };
    settleSleepRequests(ctx, next);
    if (next.step === 'handOver') return ctx.handOver(next.resume);
    if (next.step === 'done') {
      // Awaited: the deployment must hear the final state before this workflow closes.
      await ctx.setPhase(next.phase, next.reason);
      await condition(allHandlersFinished);
      return ctx.view();
    }
    next = await (STEPS[next.step] as Step<typeof next.step>)(ctx, next);
  }
}
