// Reconciliation's control activities, one file per job: what Temporal and the catalog know about
// the shards an agent reports (inspectNode, reconcile-facts.ts), rebuilding a replica and its
// deployment that Temporal lost (rebuildReplica, reconcile-rebuild.ts), making a node's
// allocations match the report (reconcileAllocations, here), and the per-node Schedule that runs
// reconcileNode (reconcile-schedule.ts).
import type { Client } from '@temporalio/client';
import type { CatalogSource } from '../catalog/watch.js';
import { nodeWorkflowId } from '../common/names.js';
import type { ReconcileAllocationsRequest, ReconcileAllocationsResult } from '../common/node-types.js';
import { reconcileAllocationsUpdate } from '../workflows/definitions.js';
import { wakeWaitersFor } from './capacity.js';
import { signedNodeRequest } from './node-requests.js';
import { inspectNode, type InspectRequest } from './reconcile-facts.js';
import type { ReportTrust } from './report-check.js';
import { rebuildReplica, type RebuildOutcome, type RebuildRequest } from './reconcile-rebuild.js';
import { createReconcileScheduleActivities } from './reconcile-schedule.js';

export function createReconcileActivities(catalog: CatalogSource, client: Client, trust: ReportTrust) {
  return {
    inspectNode: (request: InspectRequest) => inspectNode(catalog, client, request, trust),
    rebuildReplica: (request: RebuildRequest): Promise<RebuildOutcome> => rebuildReplica(client, request, catalog.get()),

    async reconcileAllocations(request: { nodeId: string } & ReconcileAllocationsRequest): Promise<ReconcileAllocationsResult> {
      const result = await client.workflow.getHandle(nodeWorkflowId(request.nodeId)).executeUpdate(reconcileAllocationsUpdate, {
        args: [
          signedNodeRequest(trust.catalogKeyFile, request.nodeId, 'reconcileAllocations', {
            claims: request.claims,
            releases: request.releases,
          }),
        ],
      });
      // GPUs freed by reconciliation go to the replicas waiting for them.
      if (result.released.length) await wakeWaitersFor(client, request.nodeId).catch(() => undefined);
      return result;
    },

    ...createReconcileScheduleActivities(client),
  };
}
