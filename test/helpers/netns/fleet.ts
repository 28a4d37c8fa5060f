// A whole llmgw stack on namespaced hosts: a Temporal dev server of the test file's own, a
// control worker and a router outside, and one agent per host inside its namespace, advertising
// the host's address (so its engines bind it). The agents reach Temporal through a Toxiproxy on
// the bridge's address, each host by a path of its own: the dev server's services find each
// other on loopback only (started with `--ip` elsewhere they dial 127.0.0.1 and fail), and the
// proxy is where latency and lost connections are added. For the e2e files and bench/faults.ts; stop() ends every process and
// removes every namespace.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { BACKSTOP_PRESENCE_SECONDS } from '../../../agent/host/presence.js';
import { deploymentStatusQuery } from '../../../workflows/definitions.js';
import type { DeploymentView } from '../../../common/replica-types.js';
import { eventually, killEnginesOf, spawnControlWorker, startSimAgent, stopAll, type LlmgwProcess } from '../processes.js';
import { spawnTestRouter } from '../router-process.js';
import { temporalAddress, testClient, uniqueId, useOwnTemporal } from '../temporal.js';
import { createNetwork, type NetHost, type Network } from './network.js';
import { startToxiproxy, type ProxyPath, type Toxiproxy } from './toxiproxy.js';

export interface NetAgent {
  host: NetHost;
  /** Its path to Temporal through the Toxiproxy. */
  path: ProxyPath;
  nodeId: string;
  stateDir: string;
  range: string;
  proc: LlmgwProcess;
}

export interface NetFleet {
  network: Network;
  agents: NetAgent[];
  nodeIds: string[];
  routerUrl: string;
  /** The router's admin listener: /health lists the endpoints it has ejected. */
  routerAdminUrl: string;
  openai: OpenAI;
  client: Awaited<ReturnType<typeof testClient>>;
  /** The agents' paths to Temporal (one per host: NetAgent.path). */
  toxiproxy: Toxiproxy;
  /** The Temporal Web UI of this fleet's dev server, when started with `webUi`. */
  webUiUrl?: string;
  /** Starts a host's agent again (same node id, state dir and port range). */
  restartAgent(agent: NetAgent): Promise<void>;
  agentOf(nodeId: string): NetAgent;
  /**
   * The node workflow's history, read for what it was told: how often the control worker said
   * the agent was silent (`agentSilent`), and the reasons its phase showed. For checking that a
   * host nobody cut was never called silent.
   */
  silentSignals(nodeId: string): Promise<number>;
  stop(): Promise<void>;
}

export interface NetFleetOptions {
  label: string;
  hosts: number;
  /** An inventory file (test/fixtures/inventories). */
  inventory: string;
  /** `--lost-grace-seconds`; the agent's default when not given. */
  lostGraceSeconds?: number;
  /**
   * `--presence-heartbeat-seconds`; the agent's default here when not given (a slow backstop:
   * the control worker's liveness sweep detects a silent agent), not the 5 s that other e2e
   * agents run with, so that these tests see the detection a real fleet has.
   */
  presenceHeartbeatSeconds?: number;
  /** Serve the dev server's Web UI (for tests that look at it). */
  webUi?: boolean;
  /** Extra `llmgw agent` flags. */
  agentFlags?: string[];
  /** Hosts on the bridge with no agent (network.hosts after the agents'): strangers on the network. */
  bystanders?: number;
}

export async function startNetFleet(options: NetFleetOptions): Promise<NetFleet> {
  const network = createNetwork(options.hosts + (options.bystanders ?? 0));
  const stops: (() => Promise<void>)[] = [async () => network.destroy()];
  const agents: NetAgent[] = [];
  const stop = async (): Promise<void> => {
    await stopAll();
    await killEnginesOf(agents.map((a) => a.nodeId));
    for (const step of stops.reverse()) await step().catch(() => undefined);
  };
  try {
    const temporal = await useOwnTemporal(options.label, { webUi: options.webUi });
    stops.push(() => temporal.stop());
    const client = await testClient();
    stops.push(() => client.close());
    const toxiproxy = await startToxiproxy(network.gateway, temporalAddress());
    stops.push(() => toxiproxy.stop());
    await spawnControlWorker();
    const router = await spawnTestRouter(['--debug-headers']);

    const startAgent = async (agent: Omit<NetAgent, 'proc'>): Promise<LlmgwProcess> =>
      (
        await startSimAgent(agent.nodeId, {
          inventory: options.inventory,
          stateDir: agent.stateDir,
          range: agent.range,
          wrap: network.inHost(agent.host, []),
          env: { TEMPORAL_ADDRESS: agent.path.listen },
          extra: [
            '--advertise-addr',
            agent.host.address,
            ...(options.lostGraceSeconds === undefined ? [] : ['--lost-grace-seconds', String(options.lostGraceSeconds)]),
            '--presence-heartbeat-seconds',
            String(options.presenceHeartbeatSeconds ?? BACKSTOP_PRESENCE_SECONDS),
            ...(options.agentFlags ?? []),
          ],
        })
      ).proc;
    await Promise.all(
      network.hosts.slice(0, options.hosts).map(async (host, i) => {
        const from = 30000 + ((process.pid * 7 + i * 100) % 30000);
        const agent = {
          host,
          path: await toxiproxy.addPath(`agent-${host.name}`),
          nodeId: uniqueId(`${options.label}-${host.name}`),
          stateDir: mkdtempSync(join(tmpdir(), `llmgw-${options.label}-${host.name}-`)),
          range: `${from}-${from + 99}`,
        };
        agents.push({ ...agent, proc: await startAgent(agent) });
      }),
    );
    agents.sort((a, b) => a.host.name.localeCompare(b.host.name));
    return {
      network,
      agents,
      nodeIds: agents.map((a) => a.nodeId),
      routerUrl: router.url,
      routerAdminUrl: router.adminUrl,
      openai: new OpenAI({ baseURL: `${router.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 15_000 }),
      client,
      toxiproxy,
      ...(temporal.webUiUrl ? { webUiUrl: temporal.webUiUrl } : {}),
      async restartAgent(agent) {
        await agent.proc.stop(5_000);
        agent.proc = await startAgent(agent);
      },
      async silentSignals(nodeId) {
        const history = await client.client.workflow.getHandle(`node/${nodeId}`).fetchHistory();
        return (history.events ?? []).filter((e) => e.workflowExecutionSignaledEventAttributes?.signalName === 'agentSilent').length;
      },
      agentOf(nodeId) {
        const agent = agents.find((a) => a.nodeId === nodeId);
        if (!agent) throw new Error(`no agent ${nodeId} in this fleet`);
        return agent;
      },
      stop,
    };
  } catch (error) {
    await stop();
    throw error;
  }
}

/** The deployment's view now. */
export function deploymentView(fleet: NetFleet, name: string): Promise<DeploymentView> {
  return fleet.client.client.workflow.getHandle(`deployment/${name}`).query(deploymentStatusQuery);
}

/**
 * Once the router serves `name` (within 30 s): a deployment Ready in Temporal reaches the router
 * at its next poll of the routes workflow, seconds later on a loaded machine, and until then
 * every request is answered 503 at once.
 */
export function servedByRouter(fleet: NetFleet, name: string): Promise<true> {
  return eventually(
    `the router to serve ${name}`,
    async () => {
      const res = await fetch(`${fleet.routerUrl}/v1/models/${encodeURIComponent(name)}`).catch(() => undefined);
      await res?.body?.cancel();
      return res?.ok ? true : undefined;
    },
    30_000,
  );
}

/** The deployment's view once `count` of its replicas are Ready (within 90 s). */
export function replicasReady(fleet: NetFleet, name: string, count: number): Promise<DeploymentView> {
  return eventually(
    `${count} replicas of ${name} Ready`,
    async () => {
      const view = await deploymentView(fleet, name);
      return view.replicas.filter((r) => r.phase === 'Ready').length === count ? view : undefined;
    },
    90_000,
  );
}
