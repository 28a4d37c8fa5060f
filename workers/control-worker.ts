// `llmgw worker`: the control worker on task queue `llmgw`. Hosts the workflows
// (deployModel, replica, node, reconcileNode) and the control activities. Stateless:
// any number can run, and killing one loses nothing (Temporal holds the state).
import { join, resolve } from 'node:path';
import { keyFileWarnings, readCatalogKeys } from '../common/catalog-key.js';
import type { Client } from '@temporalio/client';
import { Worker, type NativeConnection } from '@temporalio/worker';
import { CONTROL_TASK_QUEUE, DEFAULT_WORKER_METRICS_ADDR } from '../common/names.js';
import { createLogger, lineLog, type LineLog, type Logger } from '../common/logger.js';
import { connectWorkerConnection, installRuntime, llmgwDataConverter, connectClient, metricsAddressOf } from '../temporal/connection.js';
import { createControlMetrics, watchDeployments } from './metrics.js';
import { createControlActivities } from '../activities/index.js';
import { createLivenessBoard } from '../activities/fleet-silence.js';
import { createCatalogSource } from '../catalog/watch.js';
import { watchCatalogForDeployments } from './catalog-notifier.js';
import { watchKeyFileRemovals } from './key-file-watch.js';
import { keepRoutesWorkflow } from './ensure-routes.js';
import { watchAgentLiveness } from './liveness.js';
import {
  bundleWithBuildId,
  describeDeployment,
  keepCurrentWhenNone,
  setCurrentVersion,
  versionName,
  type VersionedBundle,
} from './versioning.js';

export interface ControlWorkerOptions {
  catalogFile: string;
  /** The catalog key file (--catalog-key, LLMGW_CATALOG_KEY_FILE) every resolved revision is signed with. */
  catalogKeyFile?: string;
  /** host:port of /metrics, or off (default LLMGW_METRICS_ADDR, else 127.0.0.1:9464). */
  metricsAddr?: string;
  logger?: Logger;
  /** Overrides the build id derived from the workflow code (LLMGW_BUILD_ID). */
  buildId?: string;
  /** The Worker Deployment name (LLMGW_DEPLOYMENT_NAME, default llmgw). */
  deploymentName?: string;
  /**
   * Make this build the Current version at start. Without it, a build becomes Current only
   * when the deployment has no Current version yet (the first install); later builds wait
   * for `llmgw upgrade`, so starting a new worker never moves traffic by itself.
   */
  makeCurrent?: boolean;
  /** Place on nodes no enrolled agent key vouches for (--trust-unenrolled-agents): the window of an upgrade from 0.2.0. */
  trustUnenrolledAgents?: boolean;
}

export async function runControlWorker(options: ControlWorkerOptions): Promise<void> {
  const logger = options.logger ?? createLogger('worker');
  const log = lineLog(logger);
  // A key file that cannot be read stops the worker now, not at the first deploy.
  const catalogKeyFile = checkCatalogKey(options.catalogKeyFile, log);
  // Before any connection: the SDK's logs (and Core's) go through our logger, and one
  // /metrics serves the SDK's metrics and ours.
  const metricsAddress = metricsAddressOf(options.metricsAddr, DEFAULT_WORKER_METRICS_ADDR);
  const runtime = installRuntime({ logger, ...(metricsAddress ? { metricsAddress } : {}) });
  if (metricsAddress) log(`metrics on http://${metricsAddress}/metrics`);
  const metrics = createControlMetrics(runtime.metricMeter);
  const { connection, namespace } = await connectWorkerConnection();
  const client = await connectClient();
  const catalog = createCatalogSource(options.catalogFile, { log });
  const liveness = createLivenessBoard();
  const activities = createControlActivities({
    liveness: liveness.latest,
    catalogFile: options.catalogFile,
    catalog,
    catalogKeyFile,
    client,
    log,
    placementMetric: (outcome, ms) => metrics.placement(outcome, ms),
    batchLineMetric: (outcome, lines) => metrics.batchLines(outcome, lines),
    trustUnenrolledAgents: options.trustUnenrolledAgents === true,
  });
  if (options.trustUnenrolledAgents)
    log(
      'TRUSTING UNENROLLED AGENTS (--trust-unenrolled-agents): replicas are placed on nodes whose registrations nobody can verify, so anyone who can signal a node workflow can redirect their traffic. Enroll every agent (`llmgw nodes`) and restart without it',
      'warn',
    );
  const stopWatchingDeployments = watchDeployments(client, runtime.metricMeter);
  const { worker, version } = await createVersionedWorker(connection, namespace, activities, options);
  const stop = (signal: string): void => {
    log(`${signal}: shutting down`);
    stopWatchingDeployments();
    worker.shutdown();
    // Temporal unreachable: the worker holds no state, so a bounded wait is enough.
    setTimeout(() => process.exit(0), 20_000).unref();
  };
  process.once('SIGINT', () => stop('SIGINT'));
  process.once('SIGTERM', () => stop('SIGTERM'));
  const running = worker.run();
  // A key taken out of the key file revokes what it signed: the notifier stops it at once.
  const keyRemovals = catalogKeyFile === undefined ? undefined : watchKeyFileRemovals(catalogKeyFile, log);
  const stopWatchingCatalog = watchCatalogForDeployments(client, catalog, log, keyRemovals);
  const stopWatchingAgents = watchAgentLiveness(client, log, { onView: liveness.set });
  const stopKeepingRoutes = keepRoutesWorkflow(client, log);
  await announceVersion(client, version, options.makeCurrent, log);
  const stopKeepingCurrent = keepCurrentWhenNone(client, version, log);
  log(`serving task queue ${CONTROL_TASK_QUEUE} as ${versionName(version)} (catalog ${options.catalogFile})`);
  try {
    await running;
  } finally {
    stopWatchingCatalog();
    stopWatchingAgents();
    stopKeepingRoutes();
    stopKeepingCurrent();
    await connection.close();
    await client.connection.close();
  }
}

/** The catalog key file, resolved; unreadable, or without a key that can sign, it is an error now. */
function checkCatalogKey(keyFile: string | undefined, log: LineLog): string | undefined {
  const catalogKeyFile = keyFile === undefined ? undefined : resolve(keyFile);
  if (catalogKeyFile === undefined) {
    log(
      'no catalog key (--catalog-key FILE or LLMGW_CATALOG_KEY_FILE): revisions go out unsigned, agents with a key refuse them, and no agent can be enrolled, so registrations are trusted unverified',
      'warn',
    );
  } else {
    const keys = readCatalogKeys(catalogKeyFile);
    for (const warning of keyFileWarnings(catalogKeyFile)) log(warning, 'warn');
    if (!keys.signing)
      throw new Error(`the catalog key file ${catalogKeyFile} holds no key that can sign: give the control worker the private key file`);
    log(
      `signing revisions, placements and routes with ${keys.signing.kind === 'hmac' ? 'the legacy shared HMAC key' : 'Ed25519 key'} ${keys.signing.id} from ${catalogKeyFile}`,
      keys.signing.kind === 'hmac' ? 'warn' : 'info',
    );
  }
  return catalogKeyFile;
}

/** Bundles the workflows under this build's id and creates the worker, versioned and Pinned by default. */
async function createVersionedWorker(
  connection: NativeConnection,
  namespace: string,
  activities: ReturnType<typeof createControlActivities>,
  options: ControlWorkerOptions,
): Promise<{ worker: Worker; version: VersionedBundle }> {
  const version = await bundleWithBuildId({
    workflowsPath: join(__dirname, '../workflows/index.js'),
    buildId: options.buildId,
    deploymentName: options.deploymentName,
    // Our workflow interceptors (reconcile metrics) are part of the bundle, and so of the build;
    // another workflows module may bring its own (the upgrade test's second build).
    interceptorModules: [require.resolve('./workflow-interceptors')],
  });
  const worker = await Worker.create({
    connection,
    namespace,
    taskQueue: CONTROL_TASK_QUEUE,
    workflowBundle: version.bundle,
    activities,
    dataConverter: llmgwDataConverter(),
    shutdownGraceTime: '10 seconds',
    // Long-running workflows are Pinned: a run keeps the code that started it and moves to a
    // new build only at continue-as-new (workflows/upgrade.ts); reconcileNode declares itself
    // AutoUpgrade (it is short and replays any build's history).
    workerDeploymentOptions: {
      version: { deploymentName: version.deploymentName, buildId: version.buildId },
      useWorkerVersioning: true,
      defaultVersioningBehavior: 'PINNED',
    },
  });
  return { worker, version };
}

/** Makes this build Current when asked (or when there is none yet); otherwise says how to move to it. */
async function announceVersion(client: Client, version: VersionedBundle, makeCurrent: boolean | undefined, log: LineLog): Promise<void> {
  const current = await describeDeployment(client, version.deploymentName).catch(() => undefined);
  if (makeCurrent || !current?.current) {
    await setCurrentVersion(client, version);
    log(`${versionName(version)} is now the Current version${current?.current ? ` (was ${current.current})` : ''}`);
  } else if (current.current !== version.buildId) {
    log(
      `${versionName(version)} is not Current (${current.current} is): it serves only workflows pinned to it; run \`llmgw upgrade\` to move to it`,
    );
  }
}
