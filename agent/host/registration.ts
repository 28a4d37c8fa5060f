// How an agent host registers with its node workflow, node/<nodeId>: signal-with-start with the
// full report and the agent's settings, again whenever presence falls silent or the node
// workflow is gone or NotReady. Agent side. Presence is the node's own way to see a dead agent;
// its heartbeat is decided once Temporal answers (presence.ts).
import { randomUUID } from 'node:crypto';
import type { Client } from '@temporalio/client';
import { CONTROL_TASK_QUEUE, nodeWorkflowId } from '../../common/names.js';
import type { LineLog } from '../../common/logger.js';
import type { AgentSettings, RegisterProof } from '../../common/node-types.js';
import type { Register } from '../../proto/gen/llmgw/v1/register_pb.js';
import { describeNodeQuery, registerSignal } from '../../workflows/definitions.js';
import type { node as nodeWorkflow } from '../../workflows/node/workflow.js';
import type { AgentConfig } from '../config.js';
import { presenceHeartbeatFor, SHORT_PRESENCE_SECONDS, watchNodeWorkflow } from './presence.js';
import type { NodeSignals } from './node-signals.js';

export interface Registration {
  /** This run of the agent process: its presence beats name it, and its registrations carry it. */
  readonly instance: string;
  /** Registers in the background; a failure is logged, and the watchdog tries again. */
  soon(): void;
  /** Decides the presence heartbeat, asking Temporal whether worker heartbeats watch us. */
  decidePresence(client: Client): Promise<void>;
  /** A presence activity asked for the host's summary: the node workflow is there. */
  presenceSeen(): void;
  /** Starts the watchdog (no presence for two heartbeats) and the look at the node workflow. */
  watch(): void;
  /** Stops both. */
  quiet(): void;
}

/** How long a registration may take to be verified and applied before the agent says so. */
const ACTED_ON_WITHIN_MS = 15_000;

type NodeHandle = ReturnType<Client['workflow']['getHandle']>;

/** How many registrations the node acted on (0 when it does not run yet, or does not answer). */
function registrationsOf(node: NodeHandle): Promise<number> {
  return node.query(describeNodeQuery).then(
    (view) => view.registrations,
    () => 0,
  );
}

/**
 * Whether the node acted on a registration after `before`: it does so only once the control
 * worker verified it (workflows/node/enrollment.ts), so "registered" means applied, not sent.
 */
async function actedOn(node: NodeHandle, before: number): Promise<boolean> {
  for (const deadline = Date.now() + ACTED_ON_WITHIN_MS; Date.now() < deadline;) {
    if ((await registrationsOf(node)) > before) return true;
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  return false;
}

export function createRegistration(
  config: AgentConfig,
  signals: NodeSignals,
  describe: () => Promise<Register>,
  log: LineLog,
  /** Signs each report with the agent's own key (agent/host/identity.ts). */
  sign: (report: Register) => RegisterProof,
): Registration {
  const workflowId = nodeWorkflowId(config.nodeId);
  const instance = randomUUID();
  const nodeInput = {
    nodeId: config.nodeId,
    // Decided once Temporal answers (presenceHeartbeatFor): long where worker heartbeats watch us.
    presenceHeartbeatSeconds: config.presenceHeartbeatSeconds ?? SHORT_PRESENCE_SECONDS,
    lostGraceSeconds: config.lostGraceSeconds,
    reconcileDryRun: config.reconcile === 'dry-run',
    reconcileEverySeconds: config.reconcileEverySeconds,
    ...(config.nodeContinueAsNewAfterEvents ? { continueAsNewAfterEvents: config.nodeContinueAsNewAfterEvents } : {}),
  };
  const register = async (): Promise<void> => {
    const client = signals.client();
    if (!client) return;
    const report = await describe();
    const node = client.workflow.getHandle(workflowId);
    const before = await registrationsOf(node);
    // The settings travel with every registration, so a restarted agent's flags take effect,
    // and name this process (not in the workflow's input, which later runs carry on).
    const {
      nodeId: _nodeId,
      continueAsNewAfterEvents: _bound,
      ...settings
    } = nodeInput as typeof nodeInput & { continueAsNewAfterEvents?: number };
    await client.workflow.signalWithStart<typeof nodeWorkflow, [typeof report, AgentSettings?, RegisterProof?]>('node', {
      workflowId,
      taskQueue: CONTROL_TASK_QUEUE,
      args: [nodeInput],
      signal: registerSignal,
      signalArgs: [report, { ...settings, agentInstance: instance }, sign(report)],
    });
    signals.registered(report.runningShards);
    if (await actedOn(node, before)) log(`registered with ${workflowId} (${report.runningShards.length} shards)`);
    else
      log(
        `sent the registration to ${workflowId}, which did not act on it within ${ACTED_ON_WITHIN_MS / 1000} s: it holds another agent key (\`llmgw nodes\` says which), or its control worker is busy`,
        'warn',
      );
  };
  const soon = (): void => {
    register().catch((error: unknown) =>
      log(`registration failed (will retry): ${error instanceof Error ? error.message : String(error)}`, 'warn'),
    );
  };
  // If the node workflow is gone (Temporal lost its data) no presence activity comes: the
  // watchdog registers again, which starts it anew.
  let lastPresence = Date.now();
  let watchdog: NodeJS.Timeout | undefined;
  let nodeWatch: { stop(): void } | undefined;
  return {
    instance,
    soon,
    async decidePresence(client) {
      nodeInput.presenceHeartbeatSeconds = await presenceHeartbeatFor(config.presenceHeartbeatSeconds, client);
      const why = config.presenceHeartbeatSeconds === undefined ? ' (worker heartbeats watch this agent; see workers/liveness.ts)' : '';
      log(`presence heartbeat ${nodeInput.presenceHeartbeatSeconds} s${why}`);
    },
    presenceSeen() {
      lastPresence = Date.now();
    },
    watch() {
      lastPresence = Date.now();
      watchdog = setInterval(() => {
        if (Date.now() - lastPresence > nodeInput.presenceHeartbeatSeconds * 2000) {
          lastPresence = Date.now();
          soon();
        }
      }, 1_000);
      // With a slow presence, a node workflow that is gone (Temporal lost its data, or someone
      // ended it) would be noticed late: look at it directly, a read that costs no event.
      nodeWatch = watchNodeWorkflow(signals.client, workflowId, soon, config.reregisterAfterSeconds);
    },
    quiet() {
      clearInterval(watchdog);
      nodeWatch?.stop();
    },
  };
}
