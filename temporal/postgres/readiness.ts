// The wait after the Temporal server on PostgreSQL starts: until it answers, has the
// namespace, has llmgw's search attributes, and accepts a workflow that carries them all.
import { readFileSync } from 'node:fs';
import { Client, Connection, isGrpcServiceError } from '@temporalio/client';
import { status as GrpcStatus } from '@grpc/grpc-js';
import { msToTs } from '@temporalio/common/lib/time';
import { frontendAnswers } from '../dev-server.js';
import { registerSearchAttributes } from '../search-attributes.js';
import { SA } from '../../common/search-attributes.js';
import { withoutTemporalEnv } from './exec.js';

const SETUP_PROBE = { workflowId: 'llmgw-setup-probe', taskQueue: 'llmgw-setup-probe', type: 'llmgwSetupProbe' } as const;

export interface ReadinessInput {
  address: string;
  namespace: string;
  temporalBin: string;
  timeoutMs: number;
  hasExited: () => boolean;
  logFile: string;
}

/** Frontend answers → namespace exists → search attributes registered → a workflow carrying them starts. */
export async function waitUntilReady({ address, namespace, temporalBin, timeoutMs, hasExited, logFile }: ReadinessInput): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let lastProblem = 'the frontend did not answer';
  const giveUp = (): Error =>
    new Error(
      `the Temporal server on PostgreSQL was not ready within ${Math.round(timeoutMs / 1000)} s (${lastProblem}); its log (${logFile}) ends:\n${tail(logFile)}`,
    );
  const step = async (what: string, attempt: () => Promise<boolean>): Promise<void> => {
    for (;;) {
      if (hasExited()) throw new Error(`the Temporal server exited while ${what}; its log (${logFile}) ends:\n${tail(logFile)}`);
      try {
        if (await attempt()) return;
      } catch (error) {
        // A search attribute of the wrong type does not fix itself by waiting.
        if (error instanceof Error && /exists with type/.test(error.message)) throw error;
        lastProblem = `${what}: ${error instanceof Error ? error.message : String(error)}`;
      }
      if (Date.now() > deadline) throw giveUp();
      await new Promise((r) => setTimeout(r, 500));
    }
  };

  await step('waiting for the frontend', () => frontendAnswers(address));
  const connection = await Connection.connect({ address: address, connectTimeout: 5_000 });
  try {
    const service = connection.workflowService;
    await step(`creating namespace ${namespace}`, async () => {
      try {
        await service.describeNamespace({ namespace: namespace });
        return true;
      } catch (error) {
        if (!isGrpcServiceError(error) || error.code !== GrpcStatus.NOT_FOUND) throw error;
      }
      await service
        .registerNamespace({ namespace: namespace, workflowExecutionRetentionPeriod: msToTs('3 days') })
        .catch((error: unknown) => {
          if (!isGrpcServiceError(error) || error.code !== GrpcStatus.ALREADY_EXISTS) throw error;
        });
      return false;
    });
    await step('registering the search attributes', async () => {
      await registerSearchAttributes(temporalBin, ['--address', address, '--namespace', namespace], withoutTemporalEnv());
      return true;
    });
    // Every service caches namespaces (the SQL search attributes are namespace aliases) and
    // refreshes them every few seconds: a workflow that carries all six attributes is the
    // proof that the services which must accept them do.
    const client = new Client({ connection, namespace: namespace });
    await step('starting a workflow with the search attributes', async () => {
      const handle = await client.workflow.start(SETUP_PROBE.type, {
        taskQueue: SETUP_PROBE.taskQueue,
        workflowId: SETUP_PROBE.workflowId,
        workflowIdConflictPolicy: 'TERMINATE_EXISTING',
        typedSearchAttributes: [
          { key: SA.deployment, value: 'llmgw-setup-probe' },
          { key: SA.model, value: 'llmgw-setup-probe' },
          { key: SA.state, value: 'Stopped' },
          { key: SA.nodes, value: [] },
          { key: SA.gpuClass, value: 'none' },
          { key: SA.freeGpus, value: 0 },
        ],
      });
      await handle.terminate('llmgw: setup probe, the server accepts workflows with llmgw search attributes');
      // Deleted, so that it never shows among the user's workflows (the deletion is asynchronous).
      await service.deleteWorkflowExecution({ namespace: namespace, workflowExecution: { workflowId: handle.workflowId } });
      return true;
    });
  } finally {
    await connection.close();
  }
}

/** The end of the server's log, its JSON lines cut to level, message and error (the stack traces would bury them). */
export function tail(file: string, lines = 12): string {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch {
    return '(no log)';
  }
  return text
    .trimEnd()
    .split('\n')
    .slice(-lines)
    .map((line) => {
      try {
        const entry = JSON.parse(line) as { level?: string; msg?: string; error?: string };
        return `${entry.level ?? ''}: ${entry.msg ?? ''}${entry.error ? `: ${entry.error}` : ''}`;
      } catch {
        return line.slice(0, 500);
      }
    })
    .join('\n');
}
