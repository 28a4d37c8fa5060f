// gpusHeldTwice: the check bench:fleet and the sim-fleet test run at every phase.
import { describe, expect, it } from 'vitest';
import { gpusHeldTwice } from '../../sim/double-held.js';

describe('gpusHeldTwice', () => {
  it('finds nothing when every GPU has one holder on each side', () => {
    const nodes = [
      {
        nodeId: 'a',
        allocations: [
          { shardId: 's1', gpuIndices: [0, 1] },
          { shardId: 's2', gpuIndices: [2] },
        ],
      },
    ];
    const engines = [
      { nodeId: 'a', shardId: 's1', cudaVisibleDevices: '0,1' },
      { nodeId: 'b', shardId: 's3', cudaVisibleDevices: '0,1' },
    ];
    expect(gpusHeldTwice(nodes, engines)).toEqual([]);
  });

  it('names a GPU two allocations hold, and one two engines run on', () => {
    const nodes = [
      {
        nodeId: 'a',
        allocations: [
          { shardId: 's1', gpuIndices: [0, 1] },
          { shardId: 's2', gpuIndices: [1] },
        ],
      },
    ];
    const engines = [
      { nodeId: 'b', shardId: 's3', cudaVisibleDevices: '4' },
      { nodeId: 'b', shardId: 's4', cudaVisibleDevices: '3,4' },
    ];
    expect(gpusHeldTwice(nodes, engines)).toEqual(['allocations: a GPU 1 held by s1 and s2', 'engines: b GPU 4 held by s3 and s4']);
  });

  it('lets one shard run several processes on its own GPUs', () => {
    const engines = [
      { nodeId: 'a', shardId: 's1', cudaVisibleDevices: '0' },
      { nodeId: 'a', shardId: 's1', cudaVisibleDevices: '0' },
    ];
    expect(gpusHeldTwice([], engines)).toEqual([]);
  });
});
