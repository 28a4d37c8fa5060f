// The node workflow's gate on registrations: a `register` signal changes the node only once the
// control worker verified it (activities/registration-check.ts), and the operator's `enroll`
// Update records which agent key may sign them. Workflow side. Anyone who can write to the
// namespace can send `register`; without this gate its address is what placement hands out
// and tickets sign (docs/signed-statements.md, "Agent identity").
import { ApplicationFailure, condition, log, setHandler } from '@temporalio/workflow';
import type { Register } from '../../proto/gen/llmgw/v1/register_pb.js';
import type { AgentEnrollment, AgentSettings, RegisterProof } from '../../common/node-types.js';
import { enrollUpdate } from '../definitions.js';
import { controlActivities } from '../toolkit.js';
import { viewOf } from './state.js';
import type { NodeContext } from './watchers.js';

export interface HeldRegistration {
  register: Register;
  settings?: AgentSettings;
  proof?: RegisterProof;
}

/** How many distinct refusals a run logs: a flood of forged registrations must not flood the log. */
const MAX_REFUSALS_LOGGED = 20;

/**
 * Verifies `held` and, if the node may act on it, applies it with `apply`. An unenrolled node
 * applies it (the operator sees the host, and the key to enroll) but gets nothing placed; an
 * enrolled node applies only what its agent's key signed, newer than what it acted on last.
 */
export async function acceptRegistration(ctx: NodeContext, held: HeldRegistration, apply: (held: HeldRegistration) => void): Promise<void> {
  // A parked run issues no commands until it is moved (workflows/upgrade.ts).
  await condition(() => !ctx.parked);
  const { state } = ctx;
  const verdict = await controlActivities('verify a registration').checkRegistration(
    {
      nodeId: state.nodeId,
      ...(held.proof ? { proof: held.proof } : {}),
      ...(state.enrollment ? { enrollment: state.enrollment } : {}),
      ...(state.lastSignedAt ? { lastSignedAt: state.lastSignedAt } : {}),
    },
    held.register,
  );
  switch (verdict.verdict) {
    case 'verified':
      // Two registrations verified at once: the later-signed one wins, whichever answer came first.
      if (state.lastSignedAt !== undefined && verdict.signedAt <= state.lastSignedAt) return;
      if (verdict.enrollment) state.enrollment = verdict.enrollment;
      state.lastSignedAt = verdict.signedAt;
      state.enrolled = true;
      state.offeredKey = undefined;
      ctx.heldRegistration = undefined;
      apply(held);
      return;
    case 'unenrolled':
      state.enrolled = false;
      state.offeredKey = held.proof?.publicKey;
      // Kept (not carried) for an enrollment that comes next: no second registration is needed.
      ctx.heldRegistration = held;
      apply(held);
      return;
    case 'rejected':
      refused(ctx, verdict.why);
      return;
    default: {
      const unknown: never = verdict;
      throw new Error(`unknown registration verdict ${JSON.stringify(unknown)}`);
    }
  }
}

function refused(ctx: NodeContext, why: string): void {
  const logged = (ctx.refusalsLogged ??= []);
  if (logged.includes(why) || logged.length >= MAX_REFUSALS_LOGGED) return;
  logged.push(why);
  log.warn(`a registration for node ${ctx.state.nodeId} was refused and changed nothing: ${why}`, { nodeId: ctx.state.nodeId });
}

/** The operator's `enroll` Update: checked against the catalog key by the control worker, then held. */
export function registerEnrollHandler(ctx: NodeContext, apply: (held: HeldRegistration) => void): void {
  const { state } = ctx;
  setHandler(
    enrollUpdate,
    async (enrollment: AgentEnrollment) => {
      await condition(() => !ctx.parked);
      const verdict = await controlActivities('verify an enrollment').checkEnrollment({ nodeId: state.nodeId, enrollment });
      if (!verdict.ok) throw ApplicationFailure.nonRetryable(`enrollment of ${state.nodeId} refused: ${verdict.why}`, 'EnrollmentRefused');
      if (state.enrollment && enrollment.enrolledAt < state.enrollment.enrolledAt)
        throw ApplicationFailure.nonRetryable(`an enrollment of ${state.enrollment.enrolledAt} is newer`, 'EnrollmentRefused');
      const sameKey = state.enrollment?.publicKey === enrollment.publicKey;
      state.enrollment = enrollment;
      if (!sameKey) state.enrolled = false;
      log.info(`agent key ${enrollment.publicKey} enrolled`, { nodeId: state.nodeId });
      const held = ctx.heldRegistration;
      if (!state.enrolled && held?.proof?.publicKey === enrollment.publicKey) await acceptRegistration(ctx, held, apply);
      ctx.publish();
      return viewOf(state);
    },
    {
      validator: (enrollment) => {
        if (enrollment?.nodeId !== state.nodeId || !enrollment.publicKey || !enrollment.signature || !enrollment.enrolledAt)
          throw new Error(`an enrollment names the node (${state.nodeId}), the public key, when and the catalog key's signature`);
      },
    },
  );
}
