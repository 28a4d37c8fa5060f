// `llmgw agent`: the only llmgw process that touches a GPU host. One agent host
// (host/start.ts) over real child processes: it discovers the host, takes over (or kills)
// what a previous agent left running, serves the node-local activities on `agent/<nodeId>`,
// registers with node/<nodeId>, and keeps engines running across its own restarts and
// across Temporal outages. This file is the process around it: Runtime, connection, signals.
import { Client, Connection } from '@temporalio/client';
import { NativeConnection } from '@temporalio/worker';
import { DEFAULT_AGENT_METRICS_ADDR } from '../common/names.js';
import { createLogger, lineLog, type LineLog } from '../common/logger.js';
import {
  installRuntime,
  llmgwDataConverter,
  metricsAddressOf,
  QUICK_RECONNECT_CHANNEL_ARGS,
  temporalConfig,
} from '../temporal/connection.js';
import { parseAgentFlags, type AgentConfig } from './config.js';
import { startAgentHost, type AgentHostDeps, type TemporalLink } from './host/start.js';
import { createAgentMetrics } from './metrics.js';

export async function runAgent(flags: Record<string, unknown>): Promise<void> {
  const config = parseAgentFlags(flags);
  const logger = createLogger('agent').child({ nodeId: config.nodeId });
  const log = lineLog(logger);
  // Before anything the SDK or our metrics do: one logger, one /metrics endpoint.
  const metricsAddress = metricsAddressOf(config.metricsAddr, DEFAULT_AGENT_METRICS_ADDR);
  const runtime = installRuntime({ logger, ...(metricsAddress ? { metricsAddress } : {}), globalTags: { llmgw_node: config.nodeId } });
  if (metricsAddress) log(`metrics on http://${metricsAddress}/metrics`);

  let connection: NativeConnection | undefined;
  const host = await startAgentHost({
    config,
    logger,
    metrics: createAgentMetrics(runtime.metricMeter),
    spawnHooks: crashHooks(log),
    temporal: async () => {
      const link = await connectUntilReachable(log);
      connection = link.connection;
      return link;
    },
  });

  let stopping = false;
  const stop = (signal: string): void => {
    if (stopping) return;
    stopping = true;
    log(`${signal}: shutting down (engines keep running; a restarted agent adopts them)`);
    host.stop(signal);
    // With Temporal unreachable the worker would wait for ever to report its last
    // activities; nothing on the host needs that, so leave after a bounded wait.
    setTimeout(() => {
      log('Temporal did not confirm the shutdown in 15 s; exiting anyway', 'warn');
      process.exit(0);
    }, 15_000).unref();
  };
  process.once('SIGINT', () => stop('SIGINT'));
  process.once('SIGTERM', () => stop('SIGTERM'));
  try {
    await host.done;
  } finally {
    await connection?.close();
  }
}

/**
 * Temporal may be down when the agent starts: engines keep running and the agent keeps
 * trying, because nothing about the host depends on the control plane being up.
 */
async function connectUntilReachable(log: LineLog): Promise<TemporalLink> {
  const { connectionOptions, namespace } = temporalConfig();
  for (let attempt = 1; ; attempt++) {
    try {
      const connection = await NativeConnection.connect(connectionOptions);
      const clientConnection = await Connection.connect({ ...connectionOptions, channelArgs: { ...QUICK_RECONNECT_CHANNEL_ARGS } });
      return {
        connection,
        namespace,
        client: new Client({ connection: clientConnection, namespace, dataConverter: llmgwDataConverter() }),
      };
    } catch (error) {
      log(
        `cannot reach Temporal at ${connectionOptions.address} (attempt ${attempt}): ${error instanceof Error ? error.message : String(error)}; retrying`,
        'warn',
      );
      await new Promise((r) => setTimeout(r, Math.min(10_000, 1_000 * attempt)));
    }
  }
}

/**
 * Startup-race tests end the agent with SIGKILL at a chosen point of a start: after the
 * spec is written but before the spawn, or after the spawn but before startShard returns.
 */
function crashHooks(log: LineLog): AgentHostDeps['spawnHooks'] {
  const crashAt = process.env.LLMGW_TEST_CRASH_AT;
  const crash = (where: string) => (): void => {
    log(`LLMGW_TEST_CRASH_AT=${where}: killing this agent with SIGKILL`);
    process.kill(process.pid, 'SIGKILL');
  };
  return {
    ...(crashAt === 'before-spawn' ? { beforeSpawn: crash(crashAt) } : {}),
    ...(crashAt === 'after-spawn' ? { afterSpawn: crash(crashAt) } : {}),
  };
}

export type { AgentConfig };
