// The agent host's Temporal worker on `agent/<nodeId>`: the node-local activities (activities.ts,
// and the weights' in weights/) over this host's supervisor, GPU health, drainer and weights
// cache. Agent side.
import { NativeConnection, Worker } from '@temporalio/worker';
import { agentTaskQueue } from '../../common/names.js';
import type { LineLog } from '../../common/logger.js';
import type { Register } from '../../proto/gen/llmgw/v1/register_pb.js';
import { llmgwDataConverter } from '../../temporal/connection.js';
import { createAgentActivities } from '../activities.js';
import type { AgentConfig } from '../config.js';
import { createDrainer } from '../drain.js';
import type { EndpointAttester, RendezvousAttester } from '../endpoint-attester.js';
import type { GpuHealth } from '../gpu-health.js';
import type { RevisionPolicy } from '../revision-check.js';
import { createStopCheck } from '../stop-check.js';
import type { Supervisor } from '../supervisor/supervisor.js';
import { createHostWeights } from '../weights/host-weights.js';
import { heldWeightsOf } from '../weights/weights-report.js';
import type { HostReports } from './describe-and-survey.js';
import type { NodeSignals } from './node-signals.js';
import type { Registration } from './registration.js';
import type { AgentMetrics, SleepCallOutcome } from '../metrics.js';

export interface HostWorkerDeps {
  connection: NativeConnection;
  namespace: string;
  config: AgentConfig;
  supervisor: Supervisor;
  gpuHealth: GpuHealth;
  reports: HostReports & { describe(): Promise<Register>; survey(): Promise<Register> };
  signals: NodeSignals;
  registration: Registration;
  log: LineLog;
  /** Activity pollers (the SDK's default when unset); a fleet of hundreds needs few. */
  activityPollers?: number;
  /** Which revisions this agent starts, and so fetches weights for. */
  revisionPolicy: RevisionPolicy;
  /** Signs the endpoint in waitHealthy's answer with the agent's key (agent/endpoint-attester.ts). */
  attestEndpoint?: EndpointAttester;
  /** Signs rank 0's rendezvous port in startShard's answer (agent/endpoint-attester.ts). */
  attestRendezvous?: RendezvousAttester;
  /** Counts sleeps and wakes among the agent's own metrics. */
  metrics?: AgentMetrics;
}

/** The worker, and the drainer it serves (closed when the worker has stopped). */
export async function createHostWorker(deps: HostWorkerDeps): Promise<{ worker: Worker; close(): void }> {
  const { config, supervisor, gpuHealth, reports, signals, registration, log } = deps;
  const drainer = createDrainer({
    statusOf: (shardId) => supervisor.status(shardId),
    tlsPinOf: (shardId) => supervisor.tlsFingerprint(shardId),
    send: signals.notify,
    log,
  });
  const activities = createAgentActivities({
    supervisor,
    ...(deps.metrics ? { onSleepCall: (call: SleepCallOutcome) => deps.metrics?.sleepCall(call) } : {}),
    ...(deps.attestEndpoint ? { attestEndpoint: deps.attestEndpoint } : {}),
    ...(deps.attestRendezvous ? { attestRendezvous: deps.attestRendezvous } : {}),
    gpuHealth: {
      refusal: (gpuIndices) => gpuHealth.refusal(gpuIndices),
      clear: (index) => {
        const cleared = gpuHealth.clear(index);
        if (cleared) registration.soon();
        return cleared;
      },
    },
    drain: (request) => drainer.drain(request),
    // Only where starts are checked against tickets: under --insecure-unsigned anyone starts anything.
    ...(deps.revisionPolicy.kind === 'keys'
      ? {
          checkStop: createStopCheck({
            ticketOf: (shardId) => supervisor.list().find((s) => s.spec?.shardId === shardId)?.spec?.placementTicket,
            client: () => signals.client(),
          }),
        }
      : {}),
    describe: reports.describe,
    survey: reports.survey,
    onPresenceStarted: registration.soon,
    presenceSummary: () => {
      registration.presenceSeen();
      const host = reports.host();
      return {
        // Names this process: a beat outliving it tells the node a replaced agent, not a dead one.
        instance: registration.instance,
        shards: supervisor.list().length,
        gpus: host.gpus.length,
        unhealthyGpus: host.gpus.filter((gpu) => gpu.health?.problems.length).map((gpu) => gpu.index),
      };
    },
  });
  const weights = createHostWeights(
    config,
    () => supervisor.list(),
    log,
    () => signals.weightsChanged(),
    deps.revisionPolicy,
  );
  signals.reportChanges({ shards: () => supervisor.list(), heldWeights: () => heldWeightsOf(weights.cache, supervisor.list()) });
  const worker = await Worker.create({
    connection: deps.connection,
    namespace: deps.namespace,
    taskQueue: agentTaskQueue(config.nodeId),
    activities: { ...activities, ...weights.activities },
    dataConverter: llmgwDataConverter(),
    // Presence runs for as long as the agent lives; leave room for engine starts besides.
    maxConcurrentActivityTaskExecutions: 200,
    ...(deps.activityPollers ? { maxConcurrentActivityTaskPolls: deps.activityPollers } : {}),
    shutdownGraceTime: '5 seconds',
  });
  return { worker, close: () => drainer.close() };
}
