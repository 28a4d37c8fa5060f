// The router's Temporal client: how it connects (short timeouts, a few retries, every call
// counted), connected on first use and dropped after a failed call. Each route source
// (routes-temporal.ts, routes-watch.ts) holds one, and the autoscaler shares its connection.
import type * as grpc from '@grpc/grpc-js';
import * as grpcRuntime from '@grpc/grpc-js';
import { Client, Connection, defaultGrpcRetryOptions, makeGrpcRetryInterceptor } from '@temporalio/client';
import { llmgwDataConverter, QUICK_RECONNECT_CHANNEL_ARGS, temporalConfig } from '../temporal/connection.js';

const CONNECT_TIMEOUT = '2 seconds';

/**
 * connectClient()'s settings (TEMPORAL_ADDRESS, namespace, TLS, API key, our data converter)
 * with a short connect timeout: during an outage every poll reconnects, and a blackholed
 * address must not hold a poll for the default ten seconds.
 */
export async function connectRoutesClient(interceptors?: grpc.Interceptor[]): Promise<Client> {
  const { connectionOptions, namespace } = temporalConfig();
  const connection = await Connection.connect({
    ...connectionOptions,
    connectTimeout: CONNECT_TIMEOUT,
    channelArgs: { ...QUICK_RECONNECT_CHANNEL_ARGS },
    ...(interceptors ? { interceptors } : {}),
  });
  return new Client({ connection, namespace, dataConverter: llmgwDataConverter() });
}

/**
 * The interceptors of a router's Temporal connection: a few retries of a failed call (an outage
 * must show as one quickly; the router's own loop retries anyway), then a count of every call
 * by method, so what the router costs Temporal shows on /metrics.
 */
export function routesInterceptors(onCall: ((method: string) => void) | undefined): grpc.Interceptor[] {
  const retry = makeGrpcRetryInterceptor(defaultGrpcRetryOptions({ maxAttempts: 3 }));
  if (!onCall) return [retry];
  const count: grpc.Interceptor = (options, nextCall) => {
    const path = options.method_definition.path;
    onCall(path.slice(path.lastIndexOf('/') + 1));
    return new grpcRuntime.InterceptingCall(nextCall(options));
  };
  return [retry, count];
}

export class LazyRoutesClient {
  private client: Client | undefined;
  private connecting: Promise<Client> | undefined;

  constructor(
    private readonly connect: (interceptors: grpc.Interceptor[]) => Promise<Client> = connectRoutesClient,
    private readonly onCall?: (method: string) => void,
  ) {}

  /** The client, connecting once however many callers ask at the same moment. */
  async get(): Promise<Client> {
    if (this.client) return this.client;
    this.connecting ??= this.connect(routesInterceptors(this.onCall)).finally(() => {
      this.connecting = undefined;
    });
    this.client = await this.connecting;
    return this.client;
  }

  /**
   * After a failed call: the next get() connects afresh, because gRPC's own reconnect backs off
   * for up to two minutes and would leave the router on a stale table long after Temporal is back.
   */
  drop(client: Client): void {
    if (this.client === client) this.client = undefined;
    void client.connection.close().catch(() => undefined);
  }

  async close(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    await client?.connection.close().catch(() => undefined);
  }
}
