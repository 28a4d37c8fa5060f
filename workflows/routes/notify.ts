// What replica and deployModel workflows call to keep the routes workflow's table current: one
// signal per route or deployment change, sent without waiting and never failing the caller (the
// routes workflow may not run yet; its seed from visibility covers that). A sender that ends or
// continues as new waits for what it sent first (signals-in-flight.ts). Workflow code.
import { getExternalWorkflowHandle, log } from '@temporalio/workflow';
import type { SignalsInFlight } from '../signals-in-flight.js';
import { deploymentChangedSignal, routeChangedSignal, ROUTES_WORKFLOW_ID, type DeploymentEntry, type RouteEntry } from './definitions.js';

/** A replica's phase or endpoint changed (Stopped or Failed removes its route). */
export function notifyRouteChanged(entry: RouteEntry, inFlight?: SignalsInFlight): void {
  const sending = getExternalWorkflowHandle(ROUTES_WORKFLOW_ID)
    .signal(routeChangedSignal, entry)
    .catch((err: unknown) => log.warn(`could not tell the routes workflow about ${entry.replicaId}: ${String(err)}`));
  inFlight?.track(sending);
}

/** A deployment's phase or desired count changed ('Undeployed' removes it). */
export function notifyDeploymentChanged(entry: DeploymentEntry, inFlight?: SignalsInFlight): void {
  const sending = getExternalWorkflowHandle(ROUTES_WORKFLOW_ID)
    .signal(deploymentChangedSignal, entry)
    .catch((err: unknown) => log.warn(`could not tell the routes workflow about deployment ${entry.name}: ${String(err)}`));
  inFlight?.track(sending);
}
