// The router's Temporal client: how it connects (short timeouts, a few retries, every call
// counted), connected on first use and dropped after a failed call. Each route source
// (routes/visibility.ts, routes/watch.ts) holds one, and the autoscaler shares its connection.
import type * as grpc from '@grpc/grpc-js';
import * as grpcRuntime from '@grpc/grpc-js';
import { Client, Connection, defaultGrpcRetryOptions, makeGrpcRetryInterceptor } from '@temporalio/client';
import { llmgwDataConverter, QUICK_RECONNECT_CHANNEL_ARGS, temporalConfig } from '../../temporal/connection.js';

const CONNECT_TIMEOUT = '2 seconds';

/** What a route source that reads Temporal is given (visibility.ts, watch.ts). */
export interface TemporalSourceOptions {
  /** Defaults to connectRoutesClient() (TEMPORAL_ADDRESS etc.). Called again after a failed call. */
  connect?: (interceptors: grpc.Interceptor[]) => Promise<Client>;
  /** For /health; defaults to the configured address and namespace. */
  description?: string;
  log?: (line: string) => void;
  /** Counts every call to Temporal by method (llmgw_router_temporal_requests_total). */
  onCall?: (method: string) => void;
}

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

type Call = ReturnType<grpc.NextCall>;

/** A call that fails at once with CANCELLED, as a call on a closed connection should. */
function closedCall(): Call {
  return {
    start(_metadata, listener) {
      const status = {
        code: grpcRuntime.status.CANCELLED,
        details: 'the router closed its Temporal connection',
        metadata: new grpcRuntime.Metadata(),
      };
      process.nextTick(() => listener?.onReceiveStatus?.(status));
    },
    cancelWithStatus() {},
    getPeer: () => '',
    sendMessageWithContext() {},
    sendMessage() {},
    startRead() {},
    halfClose() {},
    getAuthContext: () => null,
  };
}

/**
 * The interceptors of a router's Temporal connection: a few retries of a failed call (an outage
 * must show as one quickly; the router's own loop retries anyway), then a count of every call
 * by method, so what the router costs Temporal shows on /metrics. Between the two, a guard: the
 * retry interceptor tries again from a timer, and a connection closed meanwhile (the router
 * stopping, or dropping it after a failure) makes grpc-js throw "Channel has been shut down"
 * from that timer, an uncaught exception; the guard answers such a retry with CANCELLED instead.
 */
export function routesInterceptors(
  onCall: ((method: string) => void) | undefined,
  isClosed: () => boolean = () => false,
): grpc.Interceptor[] {
  const retry = makeGrpcRetryInterceptor(defaultGrpcRetryOptions({ maxAttempts: 3 }));
  const guard: grpc.Interceptor = (options, nextCall) => {
    if (isClosed()) return new grpcRuntime.InterceptingCall(closedCall());
    try {
      return new grpcRuntime.InterceptingCall(nextCall(options));
    } catch (err) {
      if (isClosed() || /shut down/.test((err as Error).message)) return new grpcRuntime.InterceptingCall(closedCall());
      throw err;
    }
  };
  if (!onCall) return [retry, guard];
  const count: grpc.Interceptor = (options, nextCall) => {
    const path = options.method_definition.path;
    onCall(path.slice(path.lastIndexOf('/') + 1));
    return new grpcRuntime.InterceptingCall(nextCall(options));
  };
  return [retry, guard, count];
}

export class LazyRoutesClient {
  private client: Client | undefined;
  private connecting: Promise<Client> | undefined;
  /** Each connection's guard reads its own flag: a dropped connection refuses retries while a new one serves. */
  private readonly closing = new WeakMap<Client, { closed: boolean }>();

  constructor(
    private readonly connect: (interceptors: grpc.Interceptor[]) => Promise<Client> = connectRoutesClient,
    private readonly onCall?: (method: string) => void,
  ) {}

  private closed = false;

  /** The client, connecting once however many callers ask at the same moment; refused once closed. */
  async get(): Promise<Client> {
    if (this.closed) throw new Error('the router closed its Temporal connection');
    if (this.client) return this.client;
    this.connecting ??= (async () => {
      const flag = { closed: false };
      const client = await this.connect(routesInterceptors(this.onCall, () => flag.closed));
      this.closing.set(client, flag);
      return client;
    })().finally(() => {
      this.connecting = undefined;
    });
    const client = await this.connecting;
    if (this.closed) {
      // Closed while connecting: this connection is nobody's.
      this.markClosed(client);
      await client.connection.close().catch(() => undefined);
      throw new Error('the router closed its Temporal connection');
    }
    this.client = client;
    return client;
  }

  /**
   * After a failed call: the next get() connects afresh, because gRPC's own reconnect backs off
   * for up to two minutes and would leave the router on a stale table long after Temporal is back.
   */
  drop(client: Client): void {
    if (this.client === client) this.client = undefined;
    this.markClosed(client);
    void client.connection.close().catch(() => undefined);
  }

  async close(): Promise<void> {
    this.closed = true;
    const client = this.client;
    this.client = undefined;
    if (!client) return;
    this.markClosed(client);
    await client.connection.close().catch(() => undefined);
  }

  private markClosed(client: Client): void {
    const flag = this.closing.get(client);
    if (flag) flag.closed = true;
  }
}
