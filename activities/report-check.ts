// inspectNode's check that the report a reconcile run is about to act on is the agent's own: it
// decides which engines are stopped and which GPUs are claimed or released, and anyone in the
// namespace can start reconcileNode with a report of their own, or complete the survey activity
// on agent/<node>. Acted on only when the agent's signature verifies against the node's enrolled
// key (the enrollment checked against the catalog key), names this node and either the calling
// reconcile run or nobody (the agent's admin socket, root only), and has not expired. Control
// side (docs/signed-statements.md, "Agent reports").
import { Context } from '@temporalio/activity';
import { enrollmentProblem } from '../common/agent-identity.js';
import { reportProblem, shardReportDigest } from '../common/agent-report.js';
import type { CatalogKey } from '../common/catalog-key.js';
import type { NodeView } from '../common/node-types.js';
import type { Register } from '../proto/gen/llmgw/v1/register_pb.js';

export interface ReportTrust {
  catalogKeys: () => CatalogKey[];
  /** `--trust-unenrolled-agents`, or no catalog key: a node with no enrolled key is reconciled unverified, as before. */
  trustUnenrolled: boolean;
  log: (line: string) => void;
  /** The worker's key file, for revocation of what runs (revoked-replicas.ts): absent, nothing is judged revoked. */
  catalogKeyFile?: string;
}

function callingRun(): { workflowId: string; runId: string } | undefined {
  try {
    return Context.current().info.workflowExecution;
  } catch {
    return undefined;
  }
}

/** Why reconciliation must not act on `report` as node `nodeId`'s, or undefined when it may. */
export function shardReportRefusal(nodeId: string, node: NodeView | undefined, report: Register, trust: ReportTrust): string | undefined {
  const enrollment = node?.enrollment;
  const keys = trust.catalogKeys();
  const unenrolled = !enrollment
    ? `node ${nodeId} has no enrolled agent key`
    : keys.length
      ? enrollmentProblem(nodeId, enrollment, keys)
      : 'the control worker has no catalog key';
  if (unenrolled || !enrollment)
    return trust.trustUnenrolled ? undefined : `${unenrolled ?? 'no enrollment'}, so nothing vouches for its report`;
  if (report.nodeId !== nodeId) return `the report names node ${report.nodeId}`;
  const caller = callingRun();
  const problem = reportProblem(report.reportSignature || undefined, enrollment.publicKey, {
    kind: 'shards',
    nodeId,
    digest: shardReportDigest(report),
    // The run that asked for it, or the agent's admin socket (an operator's hand-in).
    callers: [...(caller ? [caller] : []), { workflowId: '', runId: '' }],
    now: Date.now(),
  });
  return problem ? `the report is not its agent's: ${problem}` : undefined;
}
