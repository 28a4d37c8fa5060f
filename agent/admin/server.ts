// The agent's admin API (grpc-js): Describe, TailLogs (follow a shard's log) and the
// standard gRPC health service. Bound to loopback by default: it shows the host's
// engines and logs, so exposing it is an operator's explicit choice.
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
import { closeSync, existsSync, openSync, readSync, statSync } from 'node:fs';
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
import { grpcServiceDefinition } from './grpc-service.js';

export interface AdminDeps {
  describe(): Promise<Register>;
  logFile(shardId: string): string;
  tailLines(file: string, lines: number): string[];
}

export async function startAdminServer(address: string, deps: AdminDeps): Promise<{ port: number; close(): Promise<void> }> {
  const server = new Server();
  server.addService(grpcServiceDefinition(AgentAdminService), {
    describe: (_call: ServerUnaryCall<DescribeRequest, DescribeResponse>, callback: sendUnaryData<DescribeResponse>) => {
      deps.describe().then(
        (register) => callback(null, create(DescribeResponseSchema, { register })),
        (error: unknown) => callback({ code: GrpcStatus.INTERNAL, details: error instanceof Error ? error.message : String(error) }),
      );
    },
    tailLogs: (call: ServerWritableStream<TailLogsRequest, TailLogsResponse>) => streamLog(call, deps),
  });
  const health = new HealthImplementation({ '': 'SERVING', 'llmgw.v1.AgentAdminService': 'SERVING' });
  health.addToServer(server);
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync(address, ServerCredentials.createInsecure(), (error, boundPort) =>
      error ? reject(new Error(`admin API cannot listen on ${address}: ${error.message}`)) : resolve(boundPort),
    ),
  );
  return {
    port,
    close: () => new Promise<void>((resolve) => server.tryShutdown(() => resolve())),
  };
}

function streamLog(call: ServerWritableStream<TailLogsRequest, TailLogsResponse>, deps: AdminDeps): void {
  const { shardId, follow } = call.request;
  if (!isSafeShardId(shardId)) {
    call.destroy(Object.assign(new Error(`not a shard id: ${JSON.stringify(shardId)}`), { code: GrpcStatus.INVALID_ARGUMENT }));
    return;
  }
  const file = deps.logFile(shardId);
  if (!existsSync(file)) {
    call.destroy(Object.assign(new Error(`no log for shard ${shardId} on this agent`), { code: GrpcStatus.NOT_FOUND }));
    return;
  }
  call.write(create(TailLogsResponseSchema, { lines: deps.tailLines(file, call.request.lines || 100) }));
  if (!follow) {
    call.end();
    return;
  }
  // Follow by polling the size: the engine writes to the file directly (not through
  // the agent), and copy-truncate rotation shows up as the file getting shorter.
  let offset = statSync(file).size;
  let partial = '';
  const timer = setInterval(() => {
    try {
      const size = statSync(file).size;
      if (size < offset) offset = 0;
      if (size === offset) return;
      const fd = openSync(file, 'r');
      const buffer = Buffer.alloc(Math.min(size - offset, 1 << 20));
      const read = readSync(fd, buffer, 0, buffer.length, offset);
      closeSync(fd);
      offset += read;
      const text = partial + buffer.subarray(0, read).toString('utf8');
      const lines = text.split('\n');
      partial = lines.pop() ?? '';
      if (lines.length) call.write(create(TailLogsResponseSchema, { lines }));
    } catch {
      clearInterval(timer);
      call.end();
    }
  }, 300);
  call.on('cancelled', () => clearInterval(timer));
  call.on('close', () => clearInterval(timer));
}
