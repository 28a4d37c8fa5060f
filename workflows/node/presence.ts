// The node workflow's presence loop: one long activity on the agent's own task queue that
// heartbeats while the agent lives. Its failure is how a dead agent is noticed at O(1) cost per
// host, unless it belonged to an agent process already replaced by one that registered since.
// Workflow side.
import { ActivityCancellationType, ActivityFailure, condition, isCancellation, log, TimeoutFailure } from '@temporalio/workflow';
import { agentActivities } from '../toolkit.js';
import type { NodeContext } from './watchers.js';

export async function watchPresence(ctx: NodeContext): Promise<void> {
  const { state } = ctx;
  // A run continued from a Ready node needs no new registration for its first presence.
  let register = !(ctx.continued && state.phase === 'Ready');
  for (;;) {
    // A fresh node waits for the registration that started it; one that refused its carried
    // state has none coming unless it asks: a presence activity makes the agent register.
    if (ctx.registerSeq === 0 && state.phase === 'Registering' && !ctx.askToRegister) await condition(() => ctx.registerSeq > 0);
    const seqAtStart = ctx.registerSeq;
    const heartbeatSeconds = state.settings!.presenceHeartbeatSeconds;
    // No agent picking it up, or an agent that stops heartbeating, fails it within one
    // heartbeat period: that is how a dead agent is noticed at O(1) cost per host.
    const { presence } = agentActivities(state.nodeId, `presence of agent ${state.nodeId}`, {
      scheduleToStartTimeout: `${heartbeatSeconds} seconds`,
      heartbeatTimeout: `${heartbeatSeconds} seconds`,
      startToCloseTimeout: '3650 days',
      retry: { maximumAttempts: 1 },
      cancellationType: ActivityCancellationType.TRY_CANCEL,
    });
    try {
      const input = { nodeId: state.nodeId, heartbeatSeconds, ...(register ? {} : { register: false }) };
      register = true;
      await presence(input);
      ctx.markNotReady?.('the agent stopped (it ended its presence)');
    } catch (error) {
      if (isCancellation(error)) throw error;
      const replaced = replacedInstance(error, state.settings?.agentInstance);
      if (replaced) {
        // An agent killed and started again: the new process registered while the old one's
        // presence waited out its heartbeat timeout. Not a dead agent; the new one gets its own
        // presence at once, and it registered already.
        log.info('the presence of a replaced agent process ended', {
          nodeId: state.nodeId,
          replaced,
          current: state.settings?.agentInstance,
        });
        register = false;
        continue;
      }
      ctx.markNotReady?.(presenceFailureReason(error, heartbeatSeconds));
    }
    // The agent registers again when it comes back; until then, look again shortly.
    await condition(() => ctx.registerSeq !== seqAtStart, '3 seconds');
  }
}

/**
 * The agent process whose presence stopped heartbeating, where its beats named one (agents
 * since 0.3.0) and it is not the process that registered last; else undefined.
 */
function replacedInstance(error: unknown, current: string | undefined): string | undefined {
  if (!current || !(error instanceof ActivityFailure) || !(error.cause instanceof TimeoutFailure)) return undefined;
  const details = error.cause.lastHeartbeatDetails as { instance?: unknown } | undefined;
  const instance = typeof details?.instance === 'string' ? details.instance : undefined;
  return instance && instance !== current ? instance : undefined;
}

function presenceFailureReason(error: unknown, heartbeatSeconds: number): string {
  const cause = error instanceof ActivityFailure ? error.cause : error;
  const message = cause instanceof Error ? cause.message : String(cause);
  if (/schedule.?to.?start/i.test(message)) return `no agent picked up its presence activity within ${heartbeatSeconds} s`;
  if (/heartbeat/i.test(message)) return `the agent stopped heartbeating (timeout ${heartbeatSeconds} s)`;
  return `presence failed: ${message}`;
}
