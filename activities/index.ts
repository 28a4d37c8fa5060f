// The control worker's activities: catalog lookups, placement and reconciliation. They run on task
// queue `llmgw` beside the workflows and reach Temporal through a Client.
import type { Client } from '@temporalio/client';
import { createCatalogSource } from '../catalog/watch.js';
import { createCatalogActivities } from './catalog.js';
import { createPlacementActivities } from './placement.js';
import { createReconcileActivities } from './reconcile.js';
import { createRoutesActivities } from './routes.js';

export interface ControlActivityDeps {
  catalogFile: string;
  client: Client;
  log: (line: string) => void;
}

export function createControlActivities(deps: ControlActivityDeps) {
  const catalog = createCatalogSource(deps.catalogFile, { log: deps.log });
  return {
    ...createCatalogActivities(catalog, deps.client),
    ...createPlacementActivities(deps.client),
    ...createReconcileActivities(catalog, deps.client),
    ...createRoutesActivities(deps.client, deps.log),
  };
}

export type ControlActivities = ReturnType<typeof createControlActivities>;
