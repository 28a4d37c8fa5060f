// A namespace member's worker beside the reconciliation stack (test/helpers/reconcile-stack.ts),
// for the e2e tests of what such a member must not be able to do: the stack is started, then a
// worker on a queue of the attacker's own runs the workflows bundled from `workflowsPath` alone.
import { afterAll, beforeAll } from 'vitest';
import { NativeConnection, Worker } from '@temporalio/worker';
import { llmgwDataConverter } from '../../temporal/connection.js';
import { port, startReconcileStack, stopReconcileStack } from './reconcile-stack.js';
import { uniqueId } from './temporal.js';

/** Registers the file's beforeAll/afterAll; returns the attacker's task queue. */
export function useAttackerOnReconcileStack(workflowsPath: string): string {
  const taskQueue = uniqueId('attacker');
  let connection: NativeConnection | undefined;
  let worker: Worker | undefined;
  let running: Promise<void> | undefined;
  beforeAll(async () => {
    await startReconcileStack();
    connection = await NativeConnection.connect({ address: `127.0.0.1:${port}` });
    worker = await Worker.create({ connection, taskQueue, workflowsPath, dataConverter: llmgwDataConverter() });
    running = worker.run();
  });
  afterAll(async () => {
    worker?.shutdown();
    await running?.catch(() => undefined);
    await connection?.close();
    await stopReconcileStack();
  });
  return taskQueue;
}
