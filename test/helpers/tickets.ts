// A placement ticket for unit tests: shard demo.1.r0.a1 of replica/demo/1 on gpu-1's GPU 0 at
// 198.18.0.7, unsigned revision; a test overrides what it is about.
import type { PlacementTicket } from '../../common/placement-ticket.js';

export function demoTicket(over: Partial<PlacementTicket> = {}): PlacementTicket {
  return {
    replicaId: 'replica/demo/1',
    placedByRun: 'run-1',
    chain: 'run-1',
    issuedAt: Date.now(),
    shardId: 'demo.1.r0.a1',
    nodeId: 'gpu-1',
    rank: 0,
    nnodes: 1,
    gpus: [0],
    hcas: [],
    httpPort: 0,
    leaderAddress: '',
    leaderNode: '',
    revision: '',
    address: '198.18.0.7',
    deployment: 'demo',
    servedName: 'demo',
    peers: [],
    ...over,
  };
}
