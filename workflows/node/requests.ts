// The node workflow's gate on the GPU Updates that free or take GPUs (release, claim,
// reconcileAllocations): acted on only when they carry the control worker's MAC for this node
// (common/node-request-mac.ts), checked by a local activity (one marker event) because the
// sandbox has no crypto. Anyone who can write to the namespace can send these Updates; a release
// of a live engine's shard would have placement hand its GPUs out twice. Workflow side.
import { ApplicationFailure, condition, proxyLocalActivities } from '@temporalio/workflow';
import type { ControlActivities } from '../../activities/index.js';
import { NODE_REQUEST_PROOF_FORM, type NodeRequestProof } from '../../common/node-types.js';
import type { NodeContext } from './watchers.js';

export type GpuRequestKind = 'release' | 'claim' | 'reconcileAllocations' | 'awake';

const local = (): Pick<ControlActivities, 'checkNodeRequest'> =>
  proxyLocalActivities<ControlActivities>({
    startToCloseTimeout: '30 seconds',
    retry: { initialInterval: '1 second', maximumInterval: '30 seconds' },
  });

/**
 * The Update validator's share: a malformed proof, or none once this run has learnt that its
 * control worker checks them, is refused before anything is written to the history.
 */
export function validateProof(ctx: NodeContext, kind: GpuRequestKind, request: NodeRequestProof | undefined): void {
  const proof = request?.proof;
  if (proof === undefined) {
    if (ctx.requestsChecked)
      throw new Error(`${kind} on node ${ctx.state.nodeId} refused: it carries no proof (only the control worker frees or claims GPUs)`);
    return;
  }
  if (typeof proof !== 'string' || !NODE_REQUEST_PROOF_FORM.test(proof))
    throw new Error(`${kind} on node ${ctx.state.nodeId} refused: its proof is not a v1 node-request MAC`);
}

/**
 * Waits until the run may act (its carried state opened, not parked for an upgrade), then has the
 * control worker check the request's MAC; throws NodeRequestRefused, changing nothing, unless it holds.
 */
export async function checkedRequest(ctx: NodeContext, kind: GpuRequestKind, request: NodeRequestProof): Promise<void> {
  if (!ctx.opened || ctx.parked) await condition(() => ctx.opened && !ctx.parked);
  const verdict = await local().checkNodeRequest({ nodeId: ctx.state.nodeId, kind, request });
  ctx.requestsChecked = verdict.keyed;
  if (!verdict.ok)
    throw ApplicationFailure.nonRetryable(
      `${kind} on node ${ctx.state.nodeId} refused, nothing changed: ${verdict.why}`,
      'NodeRequestRefused',
    );
}
