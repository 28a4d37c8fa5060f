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

export interface ControlWorkerOptions {
  catalogFile: string;
  /** The catalog key file (--catalog-key, LLMGW_CATALOG_KEY_FILE) every resolved revision is signed with. */
  catalogKeyFile?: string;
  /** host:port of /metrics, or off (default LLMGW_METRICS_ADDR, else 127.0.0.1:9464). */
  metricsAddr?: string;
  logger?: Logger;
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
    log(`signing revisions with catalog key ${keys.signing.id} from ${catalogKeyFile}`);
  }
  // Before any connection: the SDK's logs (and Core's) go through our logger, and one
  // /metrics serves the SDK's metrics and ours.
  const metricsAddress = metricsAddressOf(options.metricsAddr, DEFAULT_WORKER_METRICS_ADDR);
  const runtime = installRuntime({ logger, ...(metricsAddress ? { metricsAddress } : {}) });
  if (metricsAddress) log(`metrics on http://${metricsAddress}/metrics`);
  const metrics = createControlMetrics(runtime.metricMeter);
  const { connection, namespace } = await connectWorkerConnection();
  const client = await connectClient();
  const activities = createControlActivities({
    catalogFile: options.catalogFile,
    catalogKeyFile,
    client,
    log,
    placementMetric: (outcome, ms) => metrics.placement(outcome, ms),
  });
  const stopWatchingDeployments = watchDeployments(client, runtime.metricMeter);
  const worker = await Worker.create({
    connection,
    namespace,
    taskQueue: CONTROL_TASK_QUEUE,
    workflowsPath: join(__dirname, '../workflows/index.js'),
    activities,
    dataConverter: llmgwDataConverter(),
    interceptors: { workflowModules: [require.resolve('./workflow-interceptors')] },
    shutdownGraceTime: '10 seconds',
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
  log(`serving task queue ${CONTROL_TASK_QUEUE} (catalog ${options.catalogFile})`);
  try {
    await worker.run();
  } finally {
    await connection.close();
    await client.connection.close();
  }
}
