// `llmgw sleep | wake NAME`: the sleepReplica or wakeReplica Update sent to each replica of a
// deployment (read from its status), one line per replica with the outcome and, for a wake, how
// long it took in the replica's own history. Operator side.
import { userInfo } from 'node:os';
import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import { withClient } from './client.js';
import { CliError, failureMessage } from '../errors.js';
import { deploymentWorkflowId } from '../../common/names.js';
import type { ReplicaView } from '../../common/replica-types.js';
import type { SleepRequest, WakeRequest } from '../../common/sleep-types.js';
import { sleepReplicaUpdate, wakeReplicaUpdate } from '../../workflows/definitions.js';
import { formatMs, readStatus } from './deployment-view.js';
import { newTable } from './table.js';

interface Outcome {
  replicaId: string;
  ok: boolean;
  outcome: string;
  wokeInMs?: number;
}

/** Who asks, as the replica's history records it. */
function asker(): string {
  try {
    return `cli:${userInfo().username}`;
  } catch {
    return 'cli';
  }
}

async function replicasOf(client: Client, name: string): Promise<ReplicaView[]> {
  const status = await readStatus(client.workflow.getHandle(deploymentWorkflowId(name))).catch((error: unknown) => {
    if (error instanceof WorkflowNotFoundError) throw new CliError(`no deployment named ${name} (\`llmgw status\` lists them)`);
    throw error;
  });
  if (!status) throw new CliError(`deployment ${name} is still validating: try again in a moment`);
  const running = status.replicas.filter((r) => r.phase !== 'Stopped' && r.phase !== 'Failed');
  if (!running.length) {
    throw new CliError(
      `deployment ${name} runs no replica (${status.phase}${status.reason ? `: ${status.reason}` : ''}); \`llmgw scale ${name} 1\` starts one`,
    );
  }
  return running;
}

function report(verb: string, name: string, outcomes: Outcome[], json?: boolean): void {
  if (json) console.log(JSON.stringify(outcomes, null, 2));
  else {
    const table = newTable({ head: ['replica', 'outcome'], colWidths: [null, 90], wordWrap: true });
    for (const o of outcomes) table.push([o.replicaId, o.outcome]);
    console.log(table.toString());
  }
  const failed = outcomes.filter((o) => !o.ok).length;
  if (failed === outcomes.length) throw new CliError(`no replica of ${name} could ${verb}: the reasons are above`);
  if (failed) process.exitCode = 1;
}

export async function sleepCommand(name: string, opts: { level?: '1' | '2'; force?: boolean; json?: boolean }): Promise<void> {
  const request: SleepRequest = {
    by: asker(),
    reason: 'llmgw sleep',
    ...(opts.level ? { level: Number(opts.level) as 1 | 2 } : {}),
    ...(opts.force ? { force: true } : {}),
  };
  await withClient(async (client) => {
    const outcomes: Outcome[] = [];
    for (const replica of await replicasOf(client, name)) {
      try {
        const view = await client.workflow.getHandle(replica.replicaId).executeUpdate(sleepReplicaUpdate, { args: [request] });
        outcomes.push({ replicaId: replica.replicaId, ok: true, outcome: `asleep at level ${view.sleep?.level ?? request.level ?? '?'}` });
      } catch (error) {
        outcomes.push({ replicaId: replica.replicaId, ok: false, outcome: failureMessage(error) });
      }
    }
    report('sleep', name, outcomes, opts.json);
  });
}

export async function wakeCommand(name: string, opts: { json?: boolean }): Promise<void> {
  const request: WakeRequest = { by: asker(), reason: 'llmgw wake' };
  await withClient(async (client) => {
    // All at once: each wake takes the engine's own time, and they do not wait on each other.
    const outcomes = await Promise.all(
      (await replicasOf(client, name)).map(async (replica): Promise<Outcome> => {
        try {
          const result = await client.workflow.getHandle(replica.replicaId).executeUpdate(wakeReplicaUpdate, { args: [request] });
          return result.alreadyAwake
            ? { replicaId: replica.replicaId, ok: true, outcome: 'awake already', wokeInMs: 0 }
            : { replicaId: replica.replicaId, ok: true, outcome: `woke in ${formatMs(result.wokeInMs)}`, wokeInMs: result.wokeInMs };
        } catch (error) {
          return { replicaId: replica.replicaId, ok: false, outcome: failureMessage(error) };
        }
      }),
    );
    report('wake', name, outcomes, opts.json);
  });
}
