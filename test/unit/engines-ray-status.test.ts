// Waiting for a Ray cluster: the ray status command line, and counting the joined nodes (active and
// idle, not pending) in its output, old and new. The outputs are test/fixtures/ray/status-*.txt,
// recorded from Ray 2.60, and handwritten-*.txt, written in the layout of Ray 1.x and 2.x.
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseRayStatusNodeCount, rayStatusArgs } from '../../agent/engines/index.js';

const statusOutput = (name: string): string => readFileSync(join(resolve(__dirname, '../fixtures/ray'), name), 'utf8');

describe('waiting for the Ray cluster', () => {
  it('asks the head for its status', () => {
    expect(rayStatusArgs('10.0.0.5:6379')).toEqual(['status', '--address', '10.0.0.5:6379']);
  });

  it.each([
    ['handwritten-active-idle-pending.txt', 2, 'active and idle nodes, not pending ones'],
    ['handwritten-ray1-healthy.txt', 3, 'the nodes of each type under the older "Healthy:" heading'],
    ['handwritten-ray1-healthy-launching.txt', 4, 'per-type counts, as an autoscaled cluster and Ray 1.x (Healthy:) print them'],
    ['status-one-node.txt', 1, 'the head alone, listed under Active'],
    ['status-two-nodes.txt', 2, 'head and worker, listed under Active'],
    ['status-autoscaler-v2-two-idle.txt', 2, 'idle nodes too (the autoscaler v2 lists a node with no work under Idle)'],
    ['status-starting.txt', 0, 'nothing while the head is still coming up'],
    ['status-starting-traceback.txt', 0, 'nothing while the head is still coming up'],
    ['status-no-gcs.txt', 0, 'nothing while the head is still coming up'],
    ['status-verbose-one-node.txt', 1, 'not the per-node usage of verbose output as nodes'],
    ['status-worker-left.txt', 1, 'no longer a worker that has left'],
  ])('reads %s as %i nodes: it counts %s', (name, nodes) => {
    expect(parseRayStatusNodeCount(statusOutput(name))).toBe(nodes);
  });

  it('counts nothing before the cluster is up', () => {
    expect(parseRayStatusNodeCount('')).toBe(0);
    expect(parseRayStatusNodeCount('ConnectionError: Could not find any running Ray instance.\n')).toBe(0);
    expect(parseRayStatusNodeCount('Active:\n (no active nodes)\nIdle:\n (no idle nodes)\n')).toBe(0);
  });
});
