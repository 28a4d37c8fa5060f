// The agent's signatures over what it reports about itself: a survey's or describe's answer,
// signed for the reconcile run that asked (the activity's caller), and the weights its cache
// holds, signed for the weightsHeld signal (common/agent-report.ts). Either can otherwise be
// written by anyone who can signal node/<id>, start reconcileNode with a report of their own, or
// complete an activity on agent/<node>. Agent side.
import { Context } from '@temporalio/activity';
import { AGENT_KEY_FILE, type AgentIdentity } from '../common/agent-identity.js';
import { SHARD_REPORT_TTL_MS, shardReportDigest, signReport, weightsDigest } from '../common/agent-report.js';
import type { HeldWeights } from '../common/node-types.js';
import type { Register } from '../proto/gen/llmgw/v1/register_pb.js';

export interface ReportSigner {
  /**
   * `register` signed for the calling workflow run; outside an activity (the admin socket, which
   * only root on the host reads) for nobody in particular, valid for SHARD_REPORT_TTL_MS.
   */
  shards(register: Register): Register;
  weights(weights: HeldWeights[]): string;
}

function callingExecution(): { workflowId: string; runId: string } | undefined {
  try {
    return Context.current().info.workflowExecution;
  } catch {
    return undefined;
  }
}

export function createReportSigner(identity: AgentIdentity, nodeId: string): ReportSigner {
  const keyring = { file: AGENT_KEY_FILE, signing: identity.key, all: [identity.key] };
  return {
    shards(register) {
      const caller = callingExecution() ?? { workflowId: '', runId: '' };
      const signedAt = Date.now();
      const reportSignature = signReport(
        {
          kind: 'shards',
          nodeId,
          workflowId: caller.workflowId,
          runId: caller.runId,
          signedAt,
          expiresAt: signedAt + SHARD_REPORT_TTL_MS,
          digest: shardReportDigest(register),
        },
        keyring,
      );
      return { ...register, reportSignature };
    },
    weights(weights) {
      // No expiry of its own: the agent sends its weights again after every registration, and a
      // report signed before the registration the node acted on last is not taken (placement).
      return signReport(
        { kind: 'weights', nodeId, workflowId: '', runId: '', signedAt: Date.now(), expiresAt: 0, digest: weightsDigest(weights) },
        keyring,
      );
    },
  };
}
