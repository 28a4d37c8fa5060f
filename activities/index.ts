// The control worker's activities: catalog lookups, placement and reconciliation. They run on task
// queue `llmgw` beside the workflows and reach Temporal through a Client.
import type { Client } from '@temporalio/client';
import { createCatalogSource, type CatalogSource } from '../catalog/watch.js';
import { createCatalogActivities } from './catalog.js';
import { createCapacityActivities } from './capacity.js';
import { createDeploymentActivities } from './deployments.js';
import { createPlacementActivities } from './placement.js';
import { createRoutesActivities } from './routes.js';
import { createReconcileActivities } from './reconcile.js';

export interface ControlActivityDeps {
  catalogFile: string;
  /** The worker's live catalog, when it watches it itself (workers/catalog-notifier.ts). */
  catalog?: CatalogSource;
  client: Client;
  log: (line: string) => void;
}

export function createControlActivities(deps: ControlActivityDeps) {
  const catalog = deps.catalog ?? createCatalogSource(deps.catalogFile, { log: deps.log });
  return {
    ...createCatalogActivities(catalog, deps.client),
    ...createPlacementActivities(deps.client, deps.log),
    ...createCapacityActivities(deps.client),
    ...createDeploymentActivities(deps.client),
    ...createRoutesActivities(deps.client),
    ...createReconcileActivities(catalog, deps.client),
  };
}

export type ControlActivities = ReturnType<typeof createControlActivities>;
