// One way to reach Temporal for every llmgw process: the standard TEMPORAL_ADDRESS,
// TEMPORAL_NAMESPACE, TLS and API-key settings (and the Temporal CLI's config file),
// read through @temporalio/envconfig, with our payload converter on every client.
import { Client, Connection } from '@temporalio/client';
import { NativeConnection, Runtime } from '@temporalio/worker';
import { loadClientConnectConfig } from '@temporalio/envconfig';
import type { DataConverter } from '@temporalio/common';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { temporalLogger, type Logger } from '../common/logger.js';
import { HISTOGRAM_BUCKETS } from '../common/metrics.js';

export function temporalConfig(): {
  address: string;
  namespace: string;
  connectionOptions: ReturnType<typeof loadClientConnectConfig>['connectionOptions'];
} {
  const config = loadClientConnectConfig();
  const address = config.connectionOptions.address ?? '127.0.0.1:7233';
  return { address, namespace: config.namespace ?? 'default', connectionOptions: { ...config.connectionOptions, address } };
}

/** The data converter every Client and Worker uses: our payload converter, loaded by path. */
export function llmgwDataConverter(): DataConverter {
  return { payloadConverterPath: payloadConverterModulePath() };
}

/**
 * The compiled converter module. Workers load it with require() and bundle it into the
 * workflow sandbox, so it must be JavaScript: code running from TypeScript sources
 * (tests) uses the copy that `npm run build` wrote to dist/.
 */
export function payloadConverterModulePath(): string {
  const candidates = [join(__dirname, '../common/payload-converter.js'), join(__dirname, '../dist/common/payload-converter.js')];
  const found = candidates.find((candidate) => existsSync(candidate));
  if (!found) throw new Error(`the compiled payload converter is missing (looked at ${candidates.join(', ')}): run \`npm run build\``);
  return found;
}

/**
 * gRPC channel settings for clients that must notice quickly that Temporal is back
 * (the router, the agent's signals): grpc-js otherwise backs off reconnects for up to
 * two minutes, and shares that backed-off subchannel with every new connection to the
 * same address, so even a fresh Connection would wait.
 */
export const QUICK_RECONNECT_CHANNEL_ARGS = {
  'grpc.initial_reconnect_backoff_ms': 500,
  'grpc.max_reconnect_backoff_ms': 2_000,
  'grpc.use_local_subchannel_pool': 1,
} as const;

export async function connectClient(): Promise<Client> {
  const { connectionOptions, namespace } = temporalConfig();
  const connection = await Connection.connect({ ...connectionOptions, channelArgs: { ...QUICK_RECONNECT_CHANNEL_ARGS } });
  return new Client({ connection, namespace, dataConverter: llmgwDataConverter() });
}

export async function connectWorkerConnection(): Promise<{ connection: NativeConnection; namespace: string }> {
  const { connectionOptions, namespace } = temporalConfig();
  const connection = await NativeConnection.connect(connectionOptions);
  return { connection, namespace };
}

export interface RuntimeSettings {
  /** Where the SDK's logs go (its own and Core's, forwarded): the process's logger. */
  logger: Logger;
  /**
   * host:port of the Prometheus endpoint (`/metrics`) that serves the SDK's metrics and ours
   * (made through `Runtime.metricMeter`); undefined: no endpoint.
   */
  metricsAddress?: string;
  /** Labels on every metric of the process (e.g. the agent's node id). */
  globalTags?: Record<string, string>;
  /** How often each worker heartbeats to the server (default 5 s; not a billed action). */
  workerHeartbeatSeconds?: number;
}

/**
 * Installs the Temporal Runtime of a worker process (the agent, the control worker): once, before
 * any NativeConnection or Worker. One logger for the SDK and us, and one metrics endpoint.
 */
export function installRuntime(settings: RuntimeSettings): Runtime {
  const metrics = settings.metricsAddress
    ? {
        metrics: {
          prometheus: { bindAddress: settings.metricsAddress, histogramBucketOverrides: HISTOGRAM_BUCKETS },
          ...(settings.globalTags ? { globalTags: settings.globalTags } : {}),
        },
      }
    : {};
  try {
    return Runtime.install({
      logger: temporalLogger(settings.logger),
      // Every worker tells the server it is alive this often, at no billed cost: the control
      // worker reads them (ListWorkers) to see a dead agent in seconds (workers/liveness.ts).
      workerHeartbeatInterval: `${settings.workerHeartbeatSeconds ?? 5}s`,
      telemetryOptions: { logging: { forward: {}, filter: { core: 'WARN', other: 'ERROR' } }, ...metrics },
    });
  } catch (error) {
    if (!settings.metricsAddress) throw error;
    throw new Error(
      `cannot serve metrics on ${settings.metricsAddress} (--metrics-addr, or LLMGW_METRICS_ADDR; "off" serves none): ${error instanceof Error ? error.message : String(error)}`,
      { cause: error },
    );
  }
}

/** `--metrics-addr`: host:port, or off; LLMGW_METRICS_ADDR replaces the process's default. */
export function metricsAddressOf(flag: string | undefined, fallback: string): string | undefined {
  const value = (flag ?? process.env.LLMGW_METRICS_ADDR ?? fallback).trim();
  if (value === '' || value === 'off') return undefined;
  if (!/^[^\s:]+:\d+$|^\[[0-9a-fA-F:]+\]:\d+$/.test(value))
    throw new Error(`--metrics-addr ${value}: expected HOST:PORT (e.g. 127.0.0.1:9465) or off`);
  return value;
}
