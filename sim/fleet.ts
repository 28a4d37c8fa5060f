// `llmgw sim-fleet --hosts N`: N simulated GPU hosts in one Node process. Each is the
// production agent (agent/host/start.ts: its own node id, state dir, `agent/<id>` worker,
// presence, adoption and reconciliation) over virtual engines that live in the engine host
// (sim/engines/). Simulated-fleet side. What is shared: one Temporal Runtime and one Client
// (registrations, transitions); what is not: each host's worker connection, which runs
// through a cable of its own (cable.ts) so that killing a host cuts it off like a dead host.
import { Client, Connection } from '@temporalio/client';
import { NativeConnection } from '@temporalio/worker';
import { createLogger, lineLog } from '../common/logger.js';
import { ENGINE_MARKER_ENV } from '../common/names.js';
import { installRuntime, llmgwDataConverter, metricsAddressOf, temporalConfig } from '../temporal/connection.js';
import { startAgentHost, type AgentHost } from '../agent/host/start.js';
import { createAgentMetrics } from '../agent/metrics.js';
import { PORT_MARKER_ENV } from '../agent/supervisor/processes/markers.js';
import { openCable, type Cable } from './cable.js';
import { serveControl, type ControlHandler } from './control.js';
import { openEngineHost, type EngineHostClient } from './engines/client.js';
import { hostConfig, parseSimFleetFlags } from './flags.js';

type HostState = 'starting' | 'up' | 'dead' | 'agent-dead' | 'stopped' | 'failed';

interface SimHost {
  index: number;
  nodeId: string;
  state: HostState;
  agent?: AgentHost;
  cable?: Cable;
  connection?: NativeConnection;
  released?: Promise<void>;
}

export async function runSimFleet(flags: Record<string, unknown>): Promise<void> {
  const settings = parseSimFleetFlags(flags);
  const logger = createLogger('sim-fleet');
  const say = lineLog(logger);
  const metricsAddress = metricsAddressOf(settings.metricsAddr, 'off');
  const runtime = installRuntime({ logger, ...(metricsAddress ? { metricsAddress } : {}) });
  const engines = await openEngineHost(settings.enginesSocket, say);
  const { connectionOptions, namespace, address } = temporalConfig();
  const client = new Client({ connection: await Connection.connect(connectionOptions), namespace, dataConverter: llmgwDataConverter() });
  const hosts: SimHost[] = settings.nodeIds.map((nodeId, index) => ({ index, nodeId, state: 'stopped' }));
  const byId = (nodeId: string): SimHost => {
    const host = hosts.find((h) => h.nodeId === nodeId);
    if (!host) throw new Error(`no simulated host ${nodeId} (this fleet has ${settings.nodeIds[0]} … ${settings.nodeIds.at(-1)})`);
    return host;
  };

  const start = async (host: SimHost): Promise<void> => {
    if (host.state === 'up' || host.state === 'starting') return;
    host.state = 'starting';
    host.released = undefined;
    const cable = await openCable(address);
    host.cable = cable;
    try {
      host.agent = await startAgentHost({
        config: hostConfig(settings, host.index),
        logger: logger.child({ nodeId: host.nodeId }),
        metrics: createAgentMetrics(runtime.metricMeter.withTags({ llmgw_node: host.nodeId })),
        launcher: engines.launcherFor(host.nodeId),
        activityPollers: settings.activityPollers,
        temporal: async () => {
          host.connection = await NativeConnection.connect(throughCable(connectionOptions, address, cable));
          return { connection: host.connection, client, namespace };
        },
      });
      host.state = 'up';
      void host.agent.done.catch((error: unknown) => say(`${host.nodeId}: its worker failed: ${String(error)}`, 'error'));
    } catch (error) {
      host.state = 'failed';
      cable.cut();
      throw error;
    }
  };

  // Death as Temporal sees it: the cable goes first, so nothing the dying host does reaches it.
  const kill = async (host: SimHost, withEngines: boolean): Promise<void> => {
    if (host.state !== 'up') throw new Error(`${host.nodeId} is ${host.state}, not up`);
    host.state = withEngines ? 'dead' : 'agent-dead';
    host.cable?.cut();
    host.agent?.kill();
    if (withEngines) await engines.killScope(host.nodeId);
    void release(host, say);
  };

  const control = await serveControl(settings.controlSocket, controlHandler(hosts, engines, byId, start, kill));

  const began = Date.now();
  await inBatches(hosts, settings.startConcurrency, (host) =>
    start(host).catch((error: unknown) =>
      say(`${host.nodeId} did not start: ${error instanceof Error ? error.message : String(error)}`, 'error'),
    ),
  );
  const up = hosts.filter((h) => h.state === 'up').length;
  say(
    `sim-fleet: ${up} of ${hosts.length} hosts up in ${((Date.now() - began) / 1000).toFixed(1)} s (control socket ${settings.controlSocket}, engine host pid ${engines.enginesPid})`,
  );

  await untilStopped(hosts, engines, kill, say);
  control.close();
  // Bounded: a host whose worker cannot confirm its shutdown does not hold the fleet.
  await Promise.race([Promise.allSettled(hosts.map((h) => release(h, say))), new Promise((r) => setTimeout(r, 20_000))]);
  engines.close();
  process.exit();
}

/** What `llmgw sim-ctl` can ask of the fleet (control.ts lists the commands). */
function controlHandler(
  hosts: SimHost[],
  engines: EngineHostClient,
  byId: (nodeId: string) => SimHost,
  start: (host: SimHost) => Promise<void>,
  kill: (host: SimHost, withEngines: boolean) => Promise<void>,
): ControlHandler {
  return async (command, args) => {
    const named = args.map(byId);
    switch (command) {
      case 'kill':
      case 'kill-agent':
        for (const host of named) await kill(host, command === 'kill');
        return { [command === 'kill' ? 'killed' : 'agentsKilled']: named.map((h) => h.nodeId) };
      case 'start':
        await Promise.all(named.map(start));
        return { started: named.map((h) => h.nodeId) };
      case 'status':
        return {
          hosts: hosts.map((h) => ({ nodeId: h.nodeId, state: h.state })),
          rssMb: Math.round(process.memoryUsage().rss / 2 ** 20),
          pid: process.pid,
          enginesPid: engines.enginesPid,
        };
      case 'engines':
        return { engines: engineRows(engines) };
      default:
        throw new Error(`unknown command ${command}`);
    }
  };
}

/** Resolves on SIGINT or SIGTERM (the agents are stopped), or when the engine host is lost (they are killed). */
function untilStopped(
  hosts: SimHost[],
  engines: EngineHostClient,
  kill: (host: SimHost, withEngines: boolean) => Promise<void>,
  say: (line: string, level?: 'error') => void,
): Promise<void> {
  return new Promise<void>((resolve) => {
    const stop = (why: string): void => {
      say(`${why}: stopping every agent (their engines keep running in the engine host, pid ${engines.enginesPid})`);
      for (const host of hosts) if (host.state === 'up') host.agent?.stop(why);
      resolve();
    };
    process.once('SIGINT', () => stop('SIGINT'));
    process.once('SIGTERM', () => stop('SIGTERM'));
    void engines.lost.then(() => {
      say('the engine host is gone, and every virtual engine with it: the fleet cannot go on', 'error');
      process.exitCode = 1;
      for (const host of hosts) if (host.state === 'up') void kill(host, false);
      resolve();
    });
  });
}

/** After a stop or a death: the host's worker ends, then its connection and cable are let go (once per life). */
function release(host: SimHost, say: (line: string, level?: 'warn') => void): Promise<void> {
  // What this life of the host holds: a later start gives the host new ones.
  const { agent, connection, cable } = host;
  host.released ??= (async () => {
    try {
      await Promise.race([agent?.done, new Promise((_, reject) => setTimeout(() => reject(new Error('timed out')), 60_000))]);
      await connection?.close();
    } catch (error) {
      say(`${host.nodeId}: could not release its worker: ${error instanceof Error ? error.message : String(error)}`, 'warn');
    }
    cable?.cut();
  })();
  return host.released;
}

function throughCable(options: ReturnType<typeof temporalConfig>['connectionOptions'], address: string, cable: Cable) {
  const host = address.replace(/:\d+$/, '').replace(/^\[|\]$/g, '');
  // TLS still names the server, not the loopback end of the cable.
  const tls =
    options.tls && typeof options.tls === 'object'
      ? { ...options.tls, serverNameOverride: options.tls.serverNameOverride ?? host }
      : options.tls;
  return { ...options, address: cable.address, ...(tls !== undefined ? { tls } : {}) };
}

function engineRows(engines: EngineHostClient): Record<string, unknown>[] {
  return engines.processes().map((p) => ({
    nodeId: p.scope,
    pid: p.pid,
    startTicks: p.startTicks,
    shardId: p.env[ENGINE_MARKER_ENV.shardId] ?? '',
    port: Number(p.env[PORT_MARKER_ENV] ?? 0),
    cudaVisibleDevices: p.env.CUDA_VISIBLE_DEVICES ?? '',
  }));
}

async function inBatches<T>(items: T[], size: number, each: (item: T) => Promise<unknown>): Promise<void> {
  let next = 0;
  const lane = async (): Promise<void> => {
    while (next < items.length) await each(items[next++]!);
  };
  await Promise.all(Array.from({ length: Math.min(size, items.length) }, lane));
}
