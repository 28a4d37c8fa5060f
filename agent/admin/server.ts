// The agent's admin API (grpc-js): Describe, TailLogs (follow a shard's log) and the
// standard gRPC health service. On a 0600 Unix socket in the state dir by default, or on TCP
// with a token (auth.ts): it shows the host's engines and their logs, which hold whatever an
// engine printed. Follows are bounded (follow.ts).
import {
  Server,
  ServerCredentials,
  status as GrpcStatus,
  type ServerUnaryCall,
  type ServerWritableStream,
  type sendUnaryData,
} from '@grpc/grpc-js';
import { HealthImplementation } from 'grpc-health-check';
import { create } from '@bufbuild/protobuf';
import { existsSync } from 'node:fs';
import {
  AgentAdminService,
  DescribeResponseSchema,
  TailLogsResponseSchema,
  type DescribeRequest,
  type DescribeResponse,
  type TailLogsRequest,
  type TailLogsResponse,
} from '../../proto/gen/llmgw/v1/admin_pb.js';
import type { Register } from '../../proto/gen/llmgw/v1/register_pb.js';
import { isSafeShardId } from '../../common/names.js';
import { authorized, isUnixAddress, prepareSocketPath, restrictSocket } from './auth.js';
import { capLine, followFile, FOLLOW_LIMITS } from './follow.js';
import { grpcServiceDefinition } from './grpc-service.js';

export interface AdminDeps {
  describe(): Promise<Register>;
  logFile(shardId: string): string;
  tailLines(file: string, lines: number): string[];
}

export interface AdminServer {
  /** Where clients connect: `unix:/path`, or host:port with the port actually bound. */
  address: string;
  port: number;
  close(): Promise<void>;
}

/** Ends a server stream with a status: grpc-js sends an 'error' event's status as the trailer. */
function fail(call: ServerWritableStream<TailLogsRequest, TailLogsResponse>, code: GrpcStatus, message: string): void {
  call.emit('error', { code, details: message });
}

const UNAUTHENTICATED = 'the admin API on TCP needs the token in the agent state dir (admin.token): `llmgw logs --admin-token-file FILE`';

/** Starts the API on `address`; `token` is required for TCP addresses and ignored for Unix sockets. */
export async function startAdminServer(address: string, deps: AdminDeps, token?: string): Promise<AdminServer> {
  const unix = isUnixAddress(address);
  if (!unix && token === undefined) throw new Error(`admin API on ${address}: a TCP listener needs a token`);
  const required = unix ? undefined : token;
  const follows = { open: 0 };
  const server = new Server();
  server.addService(grpcServiceDefinition(AgentAdminService), {
    describe: (call: ServerUnaryCall<DescribeRequest, DescribeResponse>, callback: sendUnaryData<DescribeResponse>) => {
      if (!authorized(call.metadata, required)) return callback({ code: GrpcStatus.UNAUTHENTICATED, details: UNAUTHENTICATED });
      deps.describe().then(
        (register) => callback(null, create(DescribeResponseSchema, { register })),
        (error: unknown) => callback({ code: GrpcStatus.INTERNAL, details: error instanceof Error ? error.message : String(error) }),
      );
    },
    tailLogs: (call: ServerWritableStream<TailLogsRequest, TailLogsResponse>) => {
      if (!authorized(call.metadata, required)) return fail(call, GrpcStatus.UNAUTHENTICATED, UNAUTHENTICATED);
      streamLog(call, deps, follows);
    },
  });
  const health = new HealthImplementation({ '': 'SERVING', 'llmgw.v1.AgentAdminService': 'SERVING' });
  health.addToServer(server);
  const socketPath = unix ? prepareSocketPath(address) : undefined;
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync(address, ServerCredentials.createInsecure(), (error, boundPort) =>
      error ? reject(new Error(`admin API cannot listen on ${address}: ${error.message}`)) : resolve(boundPort),
    ),
  );
  if (socketPath !== undefined) restrictSocket(socketPath);
  return {
    address: unix ? address : `${address.replace(/:\d+$/, '')}:${port}`,
    port,
    close: () => new Promise<void>((resolve) => server.tryShutdown(() => resolve())),
  };
}

function streamLog(call: ServerWritableStream<TailLogsRequest, TailLogsResponse>, deps: AdminDeps, follows: { open: number }): void {
  const { shardId, follow } = call.request;
  if (!isSafeShardId(shardId)) {
    fail(call, GrpcStatus.INVALID_ARGUMENT, `not a shard id: ${JSON.stringify(shardId.slice(0, 80))}`);
    return;
  }
  const file = deps.logFile(shardId);
  if (!existsSync(file)) {
    fail(call, GrpcStatus.NOT_FOUND, `no log for shard ${shardId} on this agent`);
    return;
  }
  if (follow && follows.open >= FOLLOW_LIMITS.maxFollows) {
    fail(call, GrpcStatus.RESOURCE_EXHAUSTED, `${follows.open} log follows are open on this agent (at most ${FOLLOW_LIMITS.maxFollows})`);
    return;
  }
  const wanted = Math.min(call.request.lines || 100, FOLLOW_LIMITS.maxInitialLines);
  call.write(create(TailLogsResponseSchema, { lines: deps.tailLines(file, wanted).map((line) => capLine(line)) }));
  if (!follow) {
    call.end();
    return;
  }
  follows.open++;
  let done = false;
  const follower = followFile(file, (lines) => call.write(create(TailLogsResponseSchema, { lines })), {
    onResume: (listener) => call.once('drain', listener),
    end: () => call.end(),
  });
  const finish = (): void => {
    if (done) return;
    done = true;
    follows.open--;
    follower.stop();
  };
  call.on('cancelled', finish);
  call.on('close', finish);
  call.on('finish', finish);
  call.on('error', finish);
}
