// "No GPU is held twice", checked from both sides: the node workflows' allocations (what
// Temporal promised) and the engines' CUDA_VISIBLE_DEVICES (what runs). Pure; used by the
// simulated fleet's test and bench:fleet at every phase.

export interface HeldByNode {
  nodeId: string;
  allocations: { shardId: string; gpuIndices: number[] }[];
}

export interface EngineOnGpus {
  nodeId: string;
  shardId: string;
  /** As the engine got it: "0,1". */
  cudaVisibleDevices: string;
}

/** One line per GPU held twice (empty when none is): which node, which GPU, by whom. */
export function gpusHeldTwice(nodes: HeldByNode[], engines: EngineOnGpus[]): string[] {
  const problems: string[] = [];
  const check = (source: string, nodeId: string, holders: { who: string; gpus: number[] }[]): void => {
    const owner = new Map<number, string>();
    for (const { who, gpus } of holders) {
      for (const gpu of gpus) {
        const first = owner.get(gpu);
        if (first !== undefined && first !== who) problems.push(`${source}: ${nodeId} GPU ${gpu} held by ${first} and ${who}`);
        else owner.set(gpu, who);
      }
    }
  };
  for (const node of nodes) {
    check(
      'allocations',
      node.nodeId,
      node.allocations.map((a) => ({ who: a.shardId, gpus: a.gpuIndices })),
    );
  }
  const byNode = new Map<string, EngineOnGpus[]>();
  for (const engine of engines) byNode.set(engine.nodeId, [...(byNode.get(engine.nodeId) ?? []), engine]);
  for (const [nodeId, running] of byNode) {
    check(
      'engines',
      nodeId,
      running.map((e) => ({ who: e.shardId, gpus: e.cudaVisibleDevices.split(',').filter(Boolean).map(Number) })),
    );
  }
  return problems;
}
