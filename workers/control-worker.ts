// `llmgw worker`: the control worker on task queue `llmgw`. Hosts the workflows
// (deployModel, replica, node, reconcileNode) and the control activities. Stateless:
// any number can run, and killing one loses nothing (Temporal holds the state).
import { join } from 'node:path';
import { Worker } from '@temporalio/worker';
import { CONTROL_TASK_QUEUE } from '../common/names.js';
import { connectWorkerConnection, llmgwDataConverter, connectClient } from '../temporal/connection.js';
import { createControlActivities } from '../activities/index.js';
import { ensureRoutesWorkflow } from './ensure-routes.js';

export interface ControlWorkerOptions {
  catalogFile: string;
  log?: (line: string) => void;
}

export async function runControlWorker(options: ControlWorkerOptions): Promise<void> {
  const log = options.log ?? ((line: string) => console.log(`${new Date().toISOString()} worker: ${line}`));
  const { connection, namespace } = await connectWorkerConnection();
  const client = await connectClient();
  const activities = createControlActivities({ catalogFile: options.catalogFile, client, log });
  const worker = await Worker.create({
    connection,
    namespace,
    taskQueue: CONTROL_TASK_QUEUE,
    workflowsPath: join(__dirname, '../workflows/index.js'),
    activities,
    dataConverter: llmgwDataConverter(),
    shutdownGraceTime: '10 seconds',
  });
  const stop = (signal: string): void => {
    log(`${signal}: shutting down`);
    worker.shutdown();
    // Temporal unreachable: the worker holds no state, so a bounded wait is enough.
    setTimeout(() => process.exit(0), 20_000).unref();
  };
  process.once('SIGINT', () => stop('SIGINT'));
  process.once('SIGTERM', () => stop('SIGTERM'));
  log(`serving task queue ${CONTROL_TASK_QUEUE} (catalog ${options.catalogFile})`);
  void ensureRoutesWorkflow(client, log);
  try {
    await worker.run();
  } finally {
    await connection.close();
    await client.connection.close();
  }
}
