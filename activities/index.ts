// The control worker's activities: catalog lookups, placement and reconciliation. They run on task
// queue `llmgw` beside the workflows and reach Temporal through a Client.
import type { Client } from '@temporalio/client';
import { createCatalogSource, type CatalogSource } from '../catalog/watch.js';
import type { LineLog } from '../common/logger.js';
import { readCatalogKeys } from '../common/catalog-key.js';
import { createCatalogActivities } from './catalog.js';
import { createCapacityActivities } from './capacity.js';
import { batchRouterFromEnv, createBatchChunkActivities, type BatchLineOutcome, type BatchRouterSettings } from './batch-chunk.js';
import { createBatchFileActivities, fileStoreFromEnv } from './batch-files.js';
import type { FileStore } from '../batches/file-store.js';
import { createCarriedStateActivities } from './carried-state.js';
import { createDeploymentActivities } from './deployments.js';
import { createDeploymentSigningActivities } from './deployment-signing.js';
import { createFleetSilenceActivities } from './fleet-silence.js';
import { createNodeRequestActivities } from './node-requests.js';
import type { FleetLiveness } from '../workers/liveness.js';
import { createPlacementActivities, type PlacementMetric } from './placement.js';
import { createReconcileActivities } from './reconcile.js';
import { createRegistrationCheckActivities } from './registration-check.js';
import { createRoutesActivities } from './routes.js';
import { createSharedGpuActivities } from './shared-gpus.js';
import { createRouteSigningActivities } from './route-signing.js';
import { createWeightsNodeActivities } from './weights-nodes.js';
import { createWeightsPermitActivities } from './weights-permits.js';

export interface ControlActivityDeps {
  catalogFile: string;
  /** The worker's live catalog, when it watches it itself (workers/catalog-notifier.ts). */
  catalog?: CatalogSource;
  /** The catalog key file revisions are signed with; unsigned without one. */
  catalogKeyFile?: string;
  client: Client;
  log: LineLog;
  /** Counts placements (the control worker's metrics); nothing when absent. */
  placementMetric?: PlacementMetric;
  /** Place on nodes no enrolled agent key vouches for (`--trust-unenrolled-agents`: an upgrade from 0.2.0, dev). */
  trustUnenrolledAgents?: boolean;
  /** The latest liveness sweep of this worker (workers/liveness.ts), for fleetSilence. */
  liveness?: () => FleetLiveness | undefined;
  /** Where batches read and write files; LLMGW_FILES_DIR or LLMGW_FILES_S3 when absent. */
  batchFiles?: () => Promise<FileStore>;
  /** The router batch lines go through; LLMGW_ROUTER_URL and LLMGW_BATCH_API_KEY_FILE when absent. */
  batchRouter?: BatchRouterSettings;
  /** Counts batch lines by outcome (the control worker's llmgw_batch_lines); nothing when absent. */
  batchLineMetric?: (outcome: BatchLineOutcome, lines: number) => void;
}

export function createControlActivities(deps: ControlActivityDeps) {
  const catalog = deps.catalog ?? createCatalogSource(deps.catalogFile, { log: (message) => deps.log(message, 'warn') });
  const routes = createRoutesActivities(deps.client, deps.log);
  // Without a catalog key no enrollment can be checked: such a worker places and routes as before.
  const trustUnenrolled = deps.trustUnenrolledAgents === true || deps.catalogKeyFile === undefined;
  const signing = createRouteSigningActivities(deps.client, deps.catalogKeyFile, (line) => deps.log(line, 'warn'), {
    trustUnenrolled,
    catalog,
  });
  const batchFiles = deps.batchFiles ?? fileStoreFromEnv();
  return {
    ...createBatchFileActivities(batchFiles),
    ...createBatchChunkActivities(batchFiles, deps.batchRouter ?? batchRouterFromEnv(), deps.batchLineMetric),
    ...createCatalogActivities(catalog, deps.client, deps.catalogKeyFile),
    ...createPlacementActivities(deps.client, {
      log: deps.log,
      ...(deps.placementMetric ? { metric: deps.placementMetric } : {}),
      ...(deps.catalogKeyFile ? { catalogKeyFile: deps.catalogKeyFile } : {}),
      trustUnenrolled,
      catalog,
    }),
    ...createCapacityActivities(deps.client),
    ...createDeploymentActivities(deps.client),
    ...createWeightsNodeActivities(deps.client),
    ...createWeightsPermitActivities(catalog, deps.catalogKeyFile),
    ...createFleetSilenceActivities(deps.liveness),
    ...createCarriedStateActivities(deps.client, deps.catalogKeyFile),
    ...createReconcileActivities(catalog, deps.client, {
      catalogKeys: () => (deps.catalogKeyFile ? readCatalogKeys(deps.catalogKeyFile).all : []),
      trustUnenrolled,
      ...(deps.catalogKeyFile ? { catalogKeyFile: deps.catalogKeyFile } : {}),
      log: (line) => deps.log(line, 'warn'),
    }),
    ...createRegistrationCheckActivities(deps.catalogKeyFile),
    ...createNodeRequestActivities(deps.catalogKeyFile),
    ...createSharedGpuActivities(deps.client, deps.catalogKeyFile),
    ...routes,
    ...signing,
    ...createDeploymentSigningActivities(deps.client, deps.catalogKeyFile, (line) => deps.log(line, 'warn')),
    // The routes workflow's seed: the memos' routes, signed only where the replicas bear them out.
    listReplicaRoutes: async () => signing.signRoutes(await routes.listReplicaRoutes()),
  };
}

export type ControlActivities = ReturnType<typeof createControlActivities>;
