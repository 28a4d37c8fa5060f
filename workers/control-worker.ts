// `llmgw worker`: the control worker on task queue `llmgw`. Hosts the workflows
// (deployModel, replica, node, reconcileNode) and the control activities. Stateless:
// any number can run, and killing one loses nothing (Temporal holds the state).
import { join, resolve } from 'node:path';
import { keyFileWarnings, readCatalogKeys } from '../common/catalog-key.js';
import { Worker } from '@temporalio/worker';
import { CONTROL_TASK_QUEUE, DEFAULT_WORKER_METRICS_ADDR } from '../common/names.js';
import { createLogger, lineLog, type Logger } from '../common/logger.js';
import { connectWorkerConnection, installRuntime, llmgwDataConverter, connectClient, metricsAddressOf } from '../temporal/connection.js';
import { createControlMetrics, watchDeployments } from './metrics.js';
import { createControlActivities } from '../activities/index.js';
import { createLivenessBoard } from '../activities/fleet-silence.js';
import { createCatalogSource } from '../catalog/watch.js';
import { watchCatalogForDeployments } from './catalog-notifier.js';
import { keepRoutesWorkflow } from './ensure-routes.js';
import { watchAgentLiveness } from './liveness.js';
import { bundleWithBuildId, describeDeployment, keepCurrentWhenNone, setCurrentVersion, versionName } from './versioning.js';

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
}

export async function runControlWorker(options: ControlWorkerOptions): Promise<void> {
  const logger = options.logger ?? createLogger('worker');
  const log = lineLog(logger);
  // A key file that cannot be read stops the worker now, not at the first deploy.
  const catalogKeyFile = options.catalogKeyFile === undefined ? undefined : resolve(options.catalogKeyFile);
  if (catalogKeyFile === undefined) {
    log(
      'no catalog key (--catalog-key FILE or LLMGW_CATALOG_KEY_FILE): revisions go out unsigned, and agents with a key refuse them',
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
  });
  const stopWatchingDeployments = watchDeployments(client, runtime.metricMeter);
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
  const stopWatchingCatalog = watchCatalogForDeployments(client, catalog, log);
  const stopWatchingAgents = watchAgentLiveness(client, log, { onView: liveness.set });
  const stopKeepingRoutes = keepRoutesWorkflow(client, log);
  const current = await describeDeployment(client, version.deploymentName).catch(() => undefined);
  if (options.makeCurrent || !current?.current) {
    await setCurrentVersion(client, version);
    log(`${versionName(version)} is now the Current version${current?.current ? ` (was ${current.current})` : ''}`);
  } else if (current.current !== version.buildId) {
    log(
      `${versionName(version)} is not Current (${current.current} is): it serves only workflows pinned to it; run \`llmgw upgrade\` to move to it`,
    );
  }
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
