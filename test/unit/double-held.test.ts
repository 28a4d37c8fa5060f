// gpusHeldTwice: the check bench:fleet and the sim-fleet test run at every phase.
import { describe, expect, it } from 'vitest';
import { gpusHeldTwice } from '../../sim/double-held.js';

/** A node as its workflow holds it: the GPUs allocated to each shard. */
const node = (nodeId: string, allocations: Record<string, number[]>) => ({
  nodeId,
  allocations: Object.entries(allocations).map(([shardId, gpuIndices]) => ({ shardId, gpuIndices })),
});
/** An engine process as its agent reports it: the shard it serves and the GPUs it sees. */
const engine = (nodeId: string, shardId: string, cudaVisibleDevices: string) => ({ nodeId, shardId, cudaVisibleDevices });

describe('gpusHeldTwice', () => {
  it('finds nothing when every GPU has one holder on each side', () => {
    const nodes = [node('a', { s1: [0, 1], s2: [2] })];
    const engines = [engine('a', 's1', '0,1'), engine('b', 's3', '0,1')];
    expect(gpusHeldTwice(nodes, engines)).toEqual([]);
  });

  it('names a GPU two allocations hold, and one two engines run on', () => {
    const nodes = [node('a', { s1: [0, 1], s2: [1] })];
    const engines = [engine('b', 's3', '4'), engine('b', 's4', '3,4')];
    expect(gpusHeldTwice(nodes, engines)).toEqual(['allocations: a GPU 1 held by s1 and s2', 'engines: b GPU 4 held by s3 and s4']);
  });

  it('lets one shard run several processes on its own GPUs', () => {
    const engines = [engine('a', 's1', '0'), engine('a', 's1', '0')];
    expect(gpusHeldTwice([], engines)).toEqual([]);
  });
});
