// What a replica or a deployment waits on: every live router having a replica in its table
// (rollouts count it only then) or having dropped it (a drain stops the engine only then).
// Through the awaitReplicaRouted activity, since workflow code cannot call an Update. Workflow side.
import { proxyActivities } from '@temporalio/workflow';
import type { ControlActivities } from '../../activities/index.js';

export function awaitRouters(summary: string): Pick<ControlActivities, 'awaitReplicaRouted'> {
  return proxyActivities<ControlActivities>({
    // Routers answer within a long poll; a router that is gone is not waited for after two.
    startToCloseTimeout: '15 minutes',
    heartbeatTimeout: '30 seconds',
    retry: { maximumAttempts: 3 },
    summary,
  });
}
