// Placement's check of what a node says its host's weights cache holds: the list arrives by the
// weightsHeld signal, which anyone in the namespace can send, and steers placement toward the
// node ("near"). It counts only when the agent's signature over it verifies against the node's
// enrolled key (the enrollment checked against the catalog key) and was made after the
// registration the node acted on last (the agent sends it again after each one, so an older one
// is a replay). Control side (docs/signed-statements.md, "Agent reports").
import { enrollmentProblem } from '../common/agent-identity.js';
import { reportProblem, weightsDigest } from '../common/agent-report.js';
import { freshCatalogKeys } from './catalog-keys.js';
import type { NodeView } from '../common/node-types.js';

/** `view` with `weights` as far as placement may believe them: all, or none. */
export type WeightsTrust = (view: NodeView) => NodeView;

export function createWeightsTrust(
  catalogKeyFile: string | undefined,
  trustUnenrolled: boolean,
  log: (line: string) => void,
): WeightsTrust {
  // As the registration check: a key gone from the file no longer vouches, one added does at once.
  const catalogKeys = freshCatalogKeys(catalogKeyFile);
  const logged = new Set<string>();
  const refuse = (view: NodeView, why: string): NodeView => {
    const line = `not counting the weights node ${view.nodeId} reports held: ${why}`;
    if (!logged.has(line) && logged.size < 1000) {
      logged.add(line);
      log(line);
    }
    return { ...view, weights: [] };
  };
  return (view) => {
    if (!view.weights?.length) return view;
    const enrollment = view.enrollment;
    const problem =
      enrollment && catalogKeys().length ? enrollmentProblem(view.nodeId, enrollment, catalogKeys()) : 'no agent key is enrolled';
    if (problem || !enrollment) return trustUnenrolled ? view : refuse(view, problem ?? 'no agent key is enrolled');
    const notBefore = view.registrationSignedAt ? Date.parse(view.registrationSignedAt) : undefined;
    const why = reportProblem(view.weightsProof, enrollment.publicKey, {
      kind: 'weights',
      nodeId: view.nodeId,
      digest: weightsDigest(view.weights),
      ...(notBefore !== undefined && Number.isFinite(notBefore) ? { notBefore } : {}),
      now: Date.now(),
    });
    return why ? refuse(view, why) : view;
  };
}
