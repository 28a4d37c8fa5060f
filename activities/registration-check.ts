// The control worker's check of what claims to be an agent's registration, for the node workflow
// (which cannot run node:crypto): does an enrollment signed with the catalog key name the key it
// was signed with, and is it fresh? Control side. The node acts only on a `verified` answer; an
// `unenrolled` node shows its inventory but gets nothing placed (docs/signed-statements.md, "Agent identity").
import type { Register } from '../proto/gen/llmgw/v1/register_pb.js';
import { enrollmentProblem, registrationProblem } from '../common/agent-identity.js';
import { freshCatalogKeys } from './catalog-keys.js';
import type { AgentEnrollment, RegisterProof } from '../common/node-types.js';

/** What the node holds and what came with the report (which travels as its own argument, a protobuf message). */
export interface RegistrationCheck {
  nodeId: string;
  /** Absent from agents older than agent keys (0.2.0). */
  proof?: RegisterProof;
  /** The enrollment the node holds. */
  enrollment?: AgentEnrollment;
  /** The signing time of the last registration the node acted on: nothing older is. */
  lastSignedAt?: string;
}

export type RegistrationVerdict =
  /** `enrollment`: a newer one the registration carried, which the node now holds. */
  | { verdict: 'verified'; signedAt: string; enrollment?: AgentEnrollment }
  /** No enrollment vouches for any key: shown, never placed on. */
  | { verdict: 'unenrolled'; why: string }
  | { verdict: 'rejected'; why: string };

export type EnrollmentVerdict = { ok: true } | { ok: false; why: string };

export function createRegistrationCheckActivities(catalogKeyFile: string | undefined) {
  // Read again only when the file changed (the worker checked it at start): an enrollment signed
  // with a key taken out of the file no longer vouches for its agent, as for what else it signed.
  const catalogKeys = freshCatalogKeys(catalogKeyFile);

  /** The newest enrollment of the two that verifies, or why neither does. */
  const enrollmentOf = (nodeId: string, held?: AgentEnrollment, carried?: AgentEnrollment): AgentEnrollment | string => {
    const ring = catalogKeys();
    if (!ring.length) return 'the control worker has no catalog key, so no enrollment can be verified';
    const good = [held, carried].filter((e): e is AgentEnrollment => e !== undefined && !enrollmentProblem(nodeId, e, ring));
    good.sort((a, b) => b.enrolledAt.localeCompare(a.enrolledAt));
    return good[0] ?? `no agent key is enrolled: run \`llmgw nodes enroll ${nodeId} <key>\``;
  };

  return {
    async checkRegistration(check: RegistrationCheck, register: Register): Promise<RegistrationVerdict> {
      const { nodeId, proof } = check;
      const enrollment = enrollmentOf(nodeId, check.enrollment, proof?.enrollment);
      if (typeof enrollment === 'string') return { verdict: 'unenrolled', why: enrollment };
      if (!proof) return { verdict: 'rejected', why: 'it is unsigned (an agent older than 0.3.0, or not an agent at all)' };
      const problem = registrationProblem(nodeId, register, proof, enrollment.publicKey, Date.now());
      if (problem) return { verdict: 'rejected', why: problem };
      if (check.lastSignedAt !== undefined && proof.signedAt <= check.lastSignedAt)
        return {
          verdict: 'rejected',
          why: `it was signed at ${proof.signedAt}, not after the registration acted on (${check.lastSignedAt}): a replay`,
        };
      const newer = enrollment !== check.enrollment ? { enrollment } : {};
      return { verdict: 'verified', signedAt: proof.signedAt, ...newer };
    },

    async checkEnrollment({ nodeId, enrollment }: { nodeId: string; enrollment: AgentEnrollment }): Promise<EnrollmentVerdict> {
      const ring = catalogKeys();
      if (!ring.length) return { ok: false, why: 'the control worker has no catalog key, so no enrollment can be verified' };
      const problem = enrollmentProblem(nodeId, enrollment, ring);
      return problem ? { ok: false, why: problem } : { ok: true };
    },
  };
}
