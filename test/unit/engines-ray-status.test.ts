// Waiting for a Ray cluster: the ray status command line, and counting the joined nodes (active and
// idle, not pending) in its output, old and new.
import { describe, expect, it } from 'vitest';
import { parseRayStatusNodeCount, rayStatusArgs } from '../../agent/engines/index.js';

describe('waiting for the Ray cluster', () => {
  it('asks the head for its status', () => {
    expect(rayStatusArgs('10.0.0.5:6379')).toEqual(['status', '--address', '10.0.0.5:6379']);
  });

  it('counts active and idle nodes, not pending ones', () => {
    const stdout = [
      '======== Autoscaler status: 2025-03-04 10:21:07.118220 ========',
      'Node status',
      '---------------------------------------------------------------',
      'Active:',
      ' 1 node_5f3c1e2a9b7d4c6e8f0a1b2c3d4e5f60718293a4b5c6d7e8f9012345',
      'Idle:',
      ' 1 node_81d0e2f3a4b5c6d7e8f90123456789abcdef0123456789abcdef0123',
      'Pending:',
      ' 10.0.0.7: ray.worker.gpu, launching',
      'Recent failures:',
      ' (no failures)',
      '',
      'Resources',
      '---------------------------------------------------------------',
      'Usage:',
      ' 0.0/64.0 CPU',
      ' 0.0/16.0 GPU',
      ' 0B/1.2TiB memory',
      ' 0B/186.26GiB object_store_memory',
      '',
      'Demands:',
      ' (no resource demands)',
    ].join('\n');
    expect(parseRayStatusNodeCount(stdout)).toBe(2);
  });

  it('sums counts per node type and reads the older "Healthy:" heading', () => {
    const stdout = [
      '======== Autoscaler status: 2021-10-12 13:10:21.035674 ========',
      'Node status',
      '---------------------------------------------------------------',
      'Healthy:',
      ' 1 ray.head.default',
      ' 2 ray.worker.cpu',
      'Pending:',
      ' (no pending nodes)',
      'Recent failures:',
      ' (no failures)',
    ].join('\n');
    expect(parseRayStatusNodeCount(stdout)).toBe(3);
  });

  it('counts nothing before the cluster is up', () => {
    expect(parseRayStatusNodeCount('')).toBe(0);
    expect(parseRayStatusNodeCount('ConnectionError: Could not find any running Ray instance.\n')).toBe(0);
    expect(parseRayStatusNodeCount('Active:\n (no active nodes)\nIdle:\n (no idle nodes)\n')).toBe(0);
  });
});
