// The configuration of a one-node Temporal server on PostgreSQL: every service in one
// process (like the upstream development-postgres12.yaml), persistence and visibility on
// the postgres12 plugin, no Web UI, no archival; and the dynamic config llmgw relies on.
import { chmodSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { findFreePort, isPortFree } from '../../common/ports.js';
import { visibilityDatabase, type PostgresTarget } from './target.js';

export interface ServerPorts {
  frontend: number;
  frontendHttp: number;
  frontendMembership: number;
  history: number;
  historyMembership: number;
  matching: number;
  matchingMembership: number;
  worker: number;
  workerMembership: number;
  /** Prometheus /metrics (the `action` counter is what Temporal Cloud bills). */
  metrics: number;
}

/** Free ports for every service; the frontend's is given. */
export async function chooseServerPorts(ip: string, frontend: number): Promise<ServerPorts> {
  // Membership ports go into a smallint column of the cluster's membership table, so they
  // must lie below 32768, where the kernel's ephemeral ports (free-port picks) do not.
  const [frontendMembership, historyMembership, matchingMembership, workerMembership] = await freePortsBelow32768(ip, 4);
  return {
    frontend,
    frontendHttp: await findFreePort(ip),
    frontendMembership: frontendMembership!,
    history: await findFreePort(ip),
    historyMembership: historyMembership!,
    matching: await findFreePort(ip),
    matchingMembership: matchingMembership!,
    worker: await findFreePort(ip),
    workerMembership: workerMembership!,
    metrics: await findFreePort(ip),
  };
}

/** Free ports in 20000-32767 (above the engines' and Ray's default ranges), from a random start so concurrent starts rarely collide. */
async function freePortsBelow32768(ip: string, count: number): Promise<number[]> {
  const [low, high] = [20_000, 32_767];
  const found: number[] = [];
  let candidate = low + Math.floor(Math.random() * (high - low));
  for (let tried = 0; found.length < count && tried <= high - low; tried++, candidate = candidate >= high ? low : candidate + 1)
    if (await isPortFree(candidate, ip)) found.push(candidate);
  if (found.length < count) throw new Error(`found no ${count} free ports between ${low} and ${high} on ${ip}`);
  return found;
}

export interface ServerConfigInput {
  /** The folder the server's --root points at; the config goes into <root>/config. */
  root: string;
  target: PostgresTarget;
  ip: string;
  ports: ServerPorts;
  /** Fixed for the life of the databases: Temporal refuses to start on a different count. */
  numHistoryShards: number;
  /** Dynamic config values over DYNAMIC_CONFIG, e.g. { 'frontend.namespaceRPS.visibility': 100 }. */
  dynamicConfig?: Record<string, unknown>;
}

/**
 * What llmgw needs from the server, set explicitly although 1.29.1 already defaults each
 * on, so that a server upgrade which changes a default cannot take one away unnoticed.
 */
export const DYNAMIC_CONFIG: Record<string, unknown> = {
  // Workflow Updates: the node workflow's reserve / release / claim.
  'frontend.enableUpdateWorkflowExecution': true,
  'frontend.enableUpdateWorkflowExecutionAsyncAccepted': true,
  // Update-with-Start (ExecuteMultiOperation).
  'frontend.enableExecuteMultiOperation': true,
  // Worker Deployments and Worker Versioning (versioning v3): `temporal worker deployment …`.
  'system.enableDeploymentVersions': true,
  // Worker heartbeats and ListWorkers: how the control worker sees a dead agent within
  // seconds without billing an activity heartbeat (workers/liveness.ts).
  'frontend.WorkerHeartbeatsEnabled': true,
  'frontend.ListWorkersEnabled': true,
  // Every router keeps one long-poll Update open on the routes workflow (docs/routing.md).
  'history.maxInFlightUpdates': 200,
  'frontend.workerVersioningWorkflowAPIs': true,
  // Everything else keeps the server's defaults, as a self-hosted cluster would have them.
  // Unlike start-dev (100), the visibility API (List/Count, which placement, the router
  // and `llmgw nodes` use) is limited to 10 requests per second per frontend by default.
};

/** `KEY=VALUE` flags, VALUE as JSON when it parses (true, 100, "x", [..]) and as a string otherwise, like start-dev's. */
export function parseDynamicConfigFlags(flags: string[]): Record<string, unknown> {
  const values: Record<string, unknown> = {};
  for (const flag of flags) {
    const match = /^([A-Za-z][\w.]*)=(.*)$/s.exec(flag);
    if (!match) throw new Error(`--dynamic-config-value ${flag}: expected KEY=VALUE, e.g. frontend.namespaceRPS.visibility=100`);
    const [, key, raw] = match;
    try {
      values[key!] = JSON.parse(raw!);
    } catch {
      values[key!] = raw;
    }
  }
  return values;
}

function datastore(target: PostgresTarget, database: string, maxConns: number): Record<string, unknown> {
  return {
    sql: {
      pluginName: 'postgres12',
      databaseName: database,
      connectAddr: `${target.host.includes(':') ? `[${target.host}]` : target.host}:${target.port}`,
      connectProtocol: 'tcp',
      user: target.user,
      password: target.password,
      maxConns,
      maxIdleConns: maxConns,
      maxConnLifetime: '1h',
      ...(target.tls.enabled
        ? {
            tls: { enabled: true, enableHostVerification: target.tls.verifyHost, caFile: target.tls.caFile ?? '', serverName: target.host },
          }
        : {}),
    },
  };
}

/** Writes <root>/config/development.yaml and <root>/config/dynamicconfig.yaml (owner-only: they hold the database password). */
export function writeServerConfig(input: ServerConfigInput): { configDir: string; env: string } {
  const { root, target, ip, ports } = input;
  const configDir = join(root, 'config');
  mkdirSync(configDir, { recursive: true, mode: 0o700 });
  chmodSync(configDir, 0o700);
  const dynamicConfigFile = join(configDir, 'dynamicconfig.yaml');
  const service = (grpcPort: number, membershipPort: number, httpPort?: number): Record<string, unknown> => ({
    rpc: { grpcPort, membershipPort, bindOnIP: ip, ...(httpPort ? { httpPort } : {}) },
  });
  const frontendAddress = `${ip}:${ports.frontend}`;
  const config = {
    log: { stdout: true, level: 'warn' },
    persistence: {
      defaultStore: 'postgres-default',
      visibilityStore: 'postgres-visibility',
      numHistoryShards: input.numHistoryShards,
      datastores: {
        'postgres-default': datastore(target, target.database, 20),
        'postgres-visibility': datastore(target, visibilityDatabase(target), 10),
      },
    },
    global: {
      membership: { maxJoinDuration: '30s', broadcastAddress: ip },
      metrics: { prometheus: { framework: 'tally', timerType: 'histogram', listenAddress: `${ip}:${ports.metrics}` } },
    },
    services: {
      frontend: service(ports.frontend, ports.frontendMembership, ports.frontendHttp),
      history: service(ports.history, ports.historyMembership),
      matching: service(ports.matching, ports.matchingMembership),
      worker: service(ports.worker, ports.workerMembership),
    },
    clusterMetadata: {
      enableGlobalNamespace: false,
      failoverVersionIncrement: 10,
      masterClusterName: 'active',
      currentClusterName: 'active',
      clusterInformation: {
        active: {
          enabled: true,
          initialFailoverVersion: 1,
          rpcName: 'frontend',
          rpcAddress: frontendAddress,
          httpAddress: `${ip}:${ports.frontendHttp}`,
        },
      },
    },
    dcRedirectionPolicy: { policy: 'noop' },
    archival: { history: { state: 'disabled' }, visibility: { state: 'disabled' } },
    namespaceDefaults: { archival: { history: { state: 'disabled' }, visibility: { state: 'disabled' } } },
    publicClient: { hostPort: frontendAddress },
    dynamicConfigClient: { filepath: dynamicConfigFile, pollInterval: '10s' },
  };
  const dynamic = Object.fromEntries(
    Object.entries({ ...DYNAMIC_CONFIG, ...input.dynamicConfig }).map(([key, value]) => [key, [{ value }]]),
  );
  const header = '# Written by llmgw (temporal/postgres); rewritten on every start.\n';
  for (const [file, content] of [
    [join(configDir, 'development.yaml'), stringify(config)],
    [dynamicConfigFile, stringify(dynamic)],
  ] as const) {
    writeFileSync(file, header + content, { mode: 0o600 });
    chmodSync(file, 0o600);
  }
  return { configDir, env: 'development' };
}
