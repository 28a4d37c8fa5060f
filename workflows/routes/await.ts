// What a replica or a deployment waits on: every live router having a replica in its table
// (rollouts count it only then) or having dropped it (a drain stops the engine only then).
// Through the awaitReplicaRouted activity, since workflow code cannot call an Update. Workflow side.
import type { ControlActivities } from '../../activities/index.js';
import { controlActivities } from '../toolkit.js';

export function awaitRouters(summary: string): Pick<ControlActivities, 'awaitReplicaRouted'> {
  // Routers answer within a long poll; a router that is gone is not waited for after two.
  return controlActivities(summary, { startToCloseTimeout: '15 minutes', heartbeatTimeout: '30 seconds', retry: { maximumAttempts: 3 } });
}
