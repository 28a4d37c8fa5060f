// A client for an agent's admin API, used by `llmgw logs` and the tests. A Unix socket address
// needs no token (the socket's mode decides); a TCP one needs the agent's admin.token (auth.ts).
import { credentials, makeGenericClientConstructor, type Client, type ClientReadableStream, type Metadata } from '@grpc/grpc-js';
import { create } from '@bufbuild/protobuf';
import {
  AgentAdminService,
  DescribeRequestSchema,
  TailLogsRequestSchema,
  type DescribeResponse,
  type TailLogsResponse,
} from '../../proto/gen/llmgw/v1/admin_pb.js';
import { tokenMetadata } from './auth.js';
import { grpcServiceDefinition } from './grpc-service.js';

type Unary<Res> = (request: unknown, metadata: Metadata, callback: (error: Error | null, response: Res) => void) => void;
interface AdminClient extends Client {
  describe: Unary<DescribeResponse>;
  tailLogs: (request: unknown, metadata: Metadata) => ClientReadableStream<TailLogsResponse>;
}

const AdminClientConstructor = makeGenericClientConstructor(grpcServiceDefinition(AgentAdminService), 'AgentAdminService');

export function connectAdmin(
  address: string,
  options: { token?: string } = {},
): {
  describe(): Promise<DescribeResponse>;
  tail(shardId: string, lines: number, follow: boolean): ClientReadableStream<TailLogsResponse>;
  close(): void;
} {
  const client = new AdminClientConstructor(address, credentials.createInsecure()) as unknown as AdminClient;
  const metadata = (): Metadata => tokenMetadata(options.token);
  return {
    describe: () =>
      new Promise((resolve, reject) =>
        client.describe(create(DescribeRequestSchema, {}), metadata(), (error, response) => (error ? reject(error) : resolve(response))),
      ),
    tail: (shardId, lines, follow) => client.tailLogs(create(TailLogsRequestSchema, { shardId, lines, follow }), metadata()),
    close: () => client.close(),
  };
}
