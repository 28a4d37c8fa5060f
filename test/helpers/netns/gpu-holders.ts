// Who holds which GPU, from the processes themselves: each engine the agents started carries
// its node id, shard id and CUDA_VISIBLE_DEVICES. A GPU held twice is two live shards of one
// node with a GPU index in common, whatever the control plane believes. For the network tests
// and bench/faults.ts (so it reads /proc itself rather than through the vitest helpers).
import { listPids, readEnviron } from '../../../agent/supervisor/processes/proc.js';

export interface GpuHolder {
  nodeId: string;
  gpu: string;
  shards: string[];
}

/** GPUs that more than one shard's engine holds now. */
export function gpusHeldTwice(nodeIds: string[]): GpuHolder[] {
  const holders = new Map<string, GpuHolder>();
  for (const pid of listPids()) {
    const env = readEnviron(pid);
    const nodeId = env?.LLMGW_NODE_ID ?? '';
    if (!env || !nodeIds.includes(nodeId)) continue;
    const shard = env.LLMGW_SHARD_ID ?? '';
    for (const gpu of (env.CUDA_VISIBLE_DEVICES ?? '').split(',').filter(Boolean)) {
      const holder = holders.get(`${nodeId}/${gpu}`) ?? { nodeId, gpu, shards: [] };
      // An engine's helper processes share its shard id and count once.
      if (!holder.shards.includes(shard)) holder.shards.push(shard);
      holders.set(`${nodeId}/${gpu}`, holder);
    }
  }
  return [...holders.values()].filter((h) => h.shards.length > 1);
}
