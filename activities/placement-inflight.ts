// What placements running at the same moment in one control worker share: a node's view asked
// once for all of them, and the GPUs they are reserving right now. Placing hundreds of replicas
// at once, each asked the same few best nodes (packing ranks them alike) and many reserved
// where another had just taken the room: on bench:fleet at 200 hosts, 7 queries per replica
// and a third of the reserves rejected. Control side; the node's `reserve` stays the single
// writer, so nothing here can hand out a GPU twice: it only ranks better.
import type { Client } from '@temporalio/client';
import { nodeWorkflowId } from '../common/names.js';
import type { NodeView } from '../common/node-types.js';
import { describeNodeQuery } from '../workflows/definitions.js';

export interface PlacementsInFlight {
  /** The node's view; a query already in flight for it is joined, not repeated. */
  describe(nodeId: string): Promise<NodeView | undefined>;
  /** GPUs placements of this worker are reserving on the node now. */
  reserving(nodeId: string): number;
  /** Runs a reserve, counting its GPUs against the node while it is in flight. */
  reserve<T>(nodeId: string, gpus: number, run: () => Promise<T>): Promise<T>;
}

/** `trust`: what of a view placement may believe (its weights only where the agent signed them). */
export function placementsInFlight(client: Client, trust: (view: NodeView) => NodeView = (view) => view): PlacementsInFlight {
  const queries = new Map<string, Promise<NodeView | undefined>>();
  const pending = new Map<string, number>();
  return {
    describe(nodeId) {
      const joined = queries.get(nodeId);
      if (joined) return joined;
      const asked = client.workflow
        .getHandle(nodeWorkflowId(nodeId))
        .query(describeNodeQuery)
        .then(trust)
        .catch(() => undefined)
        .finally(() => queries.delete(nodeId));
      queries.set(nodeId, asked);
      return asked;
    },
    reserving: (nodeId) => pending.get(nodeId) ?? 0,
    async reserve(nodeId, gpus, run) {
      pending.set(nodeId, (pending.get(nodeId) ?? 0) + gpus);
      try {
        return await run();
      } finally {
        const left = (pending.get(nodeId) ?? 0) - gpus;
        if (left > 0) pending.set(nodeId, left);
        else pending.delete(nodeId);
      }
    },
  };
}
