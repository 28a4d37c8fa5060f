// The node workflow's long-running loops: presence (is the agent alive? presence.ts), the Lost timer,
// reconciliation after each registration (and the reconcile Schedule kept in step with the
// agent's settings), and waking waiting replicas when the node gains capacity.
// Workflow side; the node's handlers set the flags these loops wait on.
import {
  ChildWorkflowCancellationType,
  condition,
  executeChild,
  getExternalWorkflowHandle,
  isCancellation,
  log,
  ParentClosePolicy,
} from '@temporalio/workflow';
import type { ControlActivities } from '../../activities/index.js';
import type { NodeStatusSignal } from '../../common/node-types.js';
import { nodeStatusSignal } from '../definitions.js';
import type { SignalsInFlight } from '../signals-in-flight.js';
import type { reconcileNode } from '../reconcile/workflow.js';
import { freeGpus, lostHeldBecause, type NodeState } from './state.js';
import { controlActivities } from '../toolkit.js';
import { watchPresence } from './presence.js';
import type { HeldRegistration } from './enrollment.js';

export interface NodeContext {
  state: NodeState;
  /** The shard ids the agent last reported running (agent/host/running-shards-report.ts), sorted. */
  reported?: string[];
  registerSeq: number;
  /** This run continued from another (its state is carried, not fresh). */
  continued: boolean;
  reconcileWanted: boolean;
  wakeWanted: boolean;
  publish(): void;
  tellReplicas?: () => void;
  /**
   * Tells not yet sent. The run waits for them before it continues as new (signals-in-flight.ts):
   * a replica never told its node is back stays Unknown.
   */
  tellsInFlight: SignalsInFlight;
  markNotReady?: (reason: string) => void;
  /**
   * A silence the liveness sweep reported although the agent registered more recently (its
   * seconds): it counts from the registration (watchClaimedSilence). Not carried across a
   * continue-as-new; the presence activity remains the backstop.
   */
  silenceClaimed?: number;
  /**
   * The run is parked for an upgrade, or its carried state is not checked yet: it issues no
   * commands (workflows/upgrade.ts) and acts on no registration.
   */
  parked?: boolean;
  /** Whether `state` is this run's to act on: false while a carried state's seal is unchecked (workflows/carried.ts). */
  opened: boolean;
  /** This run refused the state it was handed: its first presence asks the agent to register at once. */
  askToRegister?: boolean;
  /** The latest registration applied unenrolled, for an enrollment that comes next (enrollment.ts). */
  heldRegistration?: HeldRegistration;
  /** The refusals of registrations this run logged (each once). */
  refusalsLogged?: string[];
  /** The control worker checks GPU Updates' proofs (learnt from the first check): one without is refused by the validator. */
  requestsChecked?: boolean;
}

const control = (summary: string): ControlActivities => controlActivities(summary);

/**
 * What the node's handlers and loops do to the outside: tell its replicas about the node,
 * and turn NotReady. Created before the handlers, since a signal delivered with the run's
 * first task runs its handler before any loop starts.
 */
export function addNodeActions(ctx: NodeContext): void {
  const { state } = ctx;
  const now = (): string => new Date().toISOString();
  ctx.tellReplicas = () => {
    const status: NodeStatusSignal = { nodeId: state.nodeId, phase: state.phase, reason: state.reason, at: now() };
    for (const replicaId of new Set(state.allocations.map((allocation) => allocation.replicaId))) {
      ctx.tellsInFlight.track(getExternalWorkflowHandle(replicaId).signal(nodeStatusSignal, status));
    }
  };
  ctx.markNotReady = (reason) => {
    if (state.phase === 'NotReady' || state.phase === 'Lost') return;
    const wasReady = state.phase === 'Ready';
    state.phase = 'NotReady';
    state.reason = reason;
    state.notReadySince = now();
    log.warn('node not ready', { nodeId: state.nodeId, reason });
    ctx.publish();
    if (wasReady) ctx.tellReplicas?.();
  };
}

/** The liveness sweep's report believed: NotReady, and Ready again when the sweep hears the agent. */
export function markSilent(ctx: NodeContext, seconds: number): void {
  ctx.markNotReady?.(`the agent has sent no heartbeat for ${seconds} s (its process or host is down, or it lost Temporal)`);
  ctx.state.silent = true;
}

export function startWatchers(ctx: NodeContext): Promise<unknown> {
  return Promise.all([
    watchPresence(ctx),
    watchLost(ctx),
    runReconciles(ctx),
    wakeWaiters(ctx),
    watchReports(ctx),
    watchClaimedSilence(ctx),
  ]);
}

/**
 * A registration is a sign of life the sweep cannot see: a silence reported for longer than the
 * agent has been registered (a restart whose new worker has not beaten yet) is believed only
 * once the agent has been silent that long since it registered, and dropped if it is heard
 * first. Costs a timer only when such a report comes.
 */
async function watchClaimedSilence(ctx: NodeContext): Promise<void> {
  for (;;) {
    await condition(() => ctx.silenceClaimed !== undefined);
    const seconds = ctx.silenceClaimed!;
    const registerSeq = ctx.registerSeq;
    const due = Date.parse(ctx.state.lastRegisteredAt ?? new Date().toISOString()) + seconds * 1000;
    const settled = await condition(
      () => ctx.silenceClaimed === undefined || ctx.registerSeq !== registerSeq || ctx.state.phase !== 'Ready',
      Math.max(1, due - Date.now()),
    );
    // Registered again: the same silence counts from the new registration.
    if (settled && ctx.silenceClaimed !== undefined && ctx.registerSeq !== registerSeq && ctx.state.phase === 'Ready') continue;
    ctx.silenceClaimed = undefined;
    if (!settled) markSilent(ctx, seconds);
  }
}

async function watchLost(ctx: NodeContext): Promise<void> {
  const { state } = ctx;
  for (;;) {
    await condition(() => state.phase === 'NotReady');
    const lostGraceMs = state.settings!.lostGraceSeconds * 1000;
    const since = state.notReadySince ? Date.parse(state.notReadySince) : Date.now();
    const recovered = await condition(() => state.phase !== 'NotReady', Math.max(0, since + lostGraceMs - Date.now()));
    if (recovered) continue;
    if (await heldWhileMostAreSilent(ctx)) continue;
    state.phase = 'Lost';
    state.reason = `agent unreachable for more than ${lostGraceMs / 1000} s; its GPUs are released`;
    log.warn('node lost', { nodeId: state.nodeId });
    ctx.tellReplicas?.();
    state.allocations = [];
    ctx.publish();
  }
}

/** How often a node held back from Lost looks again: from 10 s, doubling, up to a minute. */
const HOLD_RECHECK_MS = [10_000, 20_000, 40_000, 60_000];

/**
 * Before a node is declared Lost, asks the control worker how much of the fleet is silent
 * (its liveness sweep's view): while most of it is (lostHeldBecause), the node stays NotReady,
 * its replicas Unknown and still routed, and it looks again. Returns true when it was heard
 * again meanwhile (or left NotReady otherwise); false when it may be declared Lost now.
 */
async function heldWhileMostAreSilent(ctx: NodeContext): Promise<boolean> {
  const { state } = ctx;
  const notReadyReason = state.reason;
  for (let attempt = 0; ; attempt++) {
    let held: string | undefined;
    try {
      held = lostHeldBecause(await control('how much of the fleet is silent').fleetSilence());
    } catch (error) {
      if (isCancellation(error)) throw error;
      log.warn(`could not ask how much of the fleet is silent: ${String(error)}`, { nodeId: state.nodeId });
    }
    if (!held) return false;
    const reason = `${notReadyReason}; ${held}`;
    if (state.reason !== reason && !state.cordoned) {
      state.reason = reason;
      log.warn('node not declared Lost: most of the fleet is silent', { nodeId: state.nodeId, held });
      ctx.publish();
    }
    const cordoned = state.cordoned;
    const wait = HOLD_RECHECK_MS[Math.min(attempt, HOLD_RECHECK_MS.length - 1)]!;
    await condition(() => state.phase !== 'NotReady' || state.cordoned !== cordoned, wait);
    if (state.phase !== 'NotReady') return true;
  }
}

/**
 * Every registration is reconciled: what the agent runs is matched against the catalog and
 * the replica workflows, one run at a time (a registration during a run queues one more).
 * Before that, the reconcile Schedule is made to match the agent's settings if they changed.
 */
async function runReconciles(ctx: NodeContext): Promise<void> {
  const { state } = ctx;
  for (;;) {
    await condition(() => ctx.reconcileWanted);
    ctx.reconcileWanted = false;
    const settings = state.settings!;
    const wanted = JSON.stringify({ every: settings.reconcileEverySeconds, dryRun: settings.reconcileDryRun });
    if (state.scheduleSettings !== wanted) {
      try {
        const outcome = await control(
          `sync the reconcile Schedule of ${state.nodeId}: every ${settings.reconcileEverySeconds} s${settings.reconcileDryRun ? ', dry run' : ''}`,
        ).syncReconcileSchedule({ nodeId: state.nodeId, everySeconds: settings.reconcileEverySeconds, dryRun: settings.reconcileDryRun });
        state.scheduleSettings = wanted;
        log.info(`reconcile Schedule ${outcome}`, { nodeId: state.nodeId, settings: wanted });
      } catch (error) {
        if (isCancellation(error)) throw error;
        log.warn(`could not sync the reconcile Schedule: ${String(error)}`);
      }
    }
    try {
      await executeChild<typeof reconcileNode>('reconcileNode', {
        workflowId: `reconcile/${state.nodeId}/registration-${state.registrations}`,
        args: [{ nodeId: state.nodeId, trigger: `registration ${state.registrations}`, dryRun: settings.reconcileDryRun }],
        parentClosePolicy: ParentClosePolicy.ABANDON,
        cancellationType: ChildWorkflowCancellationType.ABANDON,
        staticSummary: `reconcile ${state.nodeId} after registration ${state.registrations}`,
      });
    } catch (error) {
      if (isCancellation(error)) throw error;
      log.warn(`reconcile after registration failed: ${String(error)}`, { nodeId: state.nodeId });
    }
  }
}

/** The agent's report and the node's allocations disagree for longer than this: reconcile. */
const SETTLE = '30 seconds';

/**
 * Reconciliation driven by change: when what the agent runs differs from what the node holds,
 * and still does after a moment (a start or a stop in flight settles by itself), reconcile.
 * The same disagreement is reconciled once; a steady node costs nothing.
 */
async function watchReports(ctx: NodeContext): Promise<void> {
  const held = (): string => [...new Set(ctx.state.allocations.map((a) => a.shardId))].sort().join(',');
  const differs = (): boolean => ctx.reported !== undefined && ctx.reported.join(',') !== held();
  let lastTriggered = '';
  for (;;) {
    await condition(() => differs() && `${ctx.reported!.join(',')}|${held()}` !== lastTriggered);
    const settled = await condition(() => !differs(), SETTLE);
    if (settled) continue;
    lastTriggered = `${ctx.reported!.join(',')}|${held()}`;
    log.info('the agent runs other shards than the node holds: reconciling', {
      nodeId: ctx.state.nodeId,
      reported: ctx.reported,
      held: held(),
    });
    ctx.reconcileWanted = true;
  }
}

/** A registration or an uncordon may bring free GPUs: wake the replicas waiting for them. */
async function wakeWaiters(ctx: NodeContext): Promise<void> {
  for (;;) {
    await condition(() => ctx.wakeWanted);
    ctx.wakeWanted = false;
    if (ctx.state.phase !== 'Ready' || ctx.state.cordoned || !freeGpus(ctx.state).length) continue;
    try {
      await control(`wake replicas waiting for ${ctx.state.inventory?.gpuClass ?? ''} GPUs`).wakeWaiters({ nodeId: ctx.state.nodeId });
    } catch (error) {
      if (isCancellation(error)) throw error;
      log.warn(`could not wake waiting replicas: ${String(error)}`);
    }
  }
}
