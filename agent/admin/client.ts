// A client for an agent's admin API, used by `llmgw logs` and the tests.
import { credentials, makeGenericClientConstructor, type Client, type ClientReadableStream } from '@grpc/grpc-js';
import { create } from '@bufbuild/protobuf';
import {
  AgentAdminService,
  DescribeRequestSchema,
  TailLogsRequestSchema,
  type DescribeResponse,
  type TailLogsResponse,
} from '../../proto/gen/llmgw/v1/admin_pb.js';
import { grpcServiceDefinition } from './grpc-service.js';

type Unary<Res> = (request: unknown, callback: (error: Error | null, response: Res) => void) => void;
interface AdminClient extends Client {
  describe: Unary<DescribeResponse>;
  tailLogs: (request: unknown) => ClientReadableStream<TailLogsResponse>;
}

const AdminClientConstructor = makeGenericClientConstructor(grpcServiceDefinition(AgentAdminService), 'AgentAdminService');

export function connectAdmin(address: string): {
  describe(): Promise<DescribeResponse>;
  tail(shardId: string, lines: number, follow: boolean): ClientReadableStream<TailLogsResponse>;
  close(): void;
} {
  const client = new AdminClientConstructor(address, credentials.createInsecure()) as unknown as AdminClient;
  return {
    describe: () =>
      new Promise((resolve, reject) =>
        client.describe(create(DescribeRequestSchema, {}), (error, response) => (error ? reject(error) : resolve(response))),
      ),
    tail: (shardId, lines, follow) => client.tailLogs(create(TailLogsRequestSchema, { shardId, lines, follow })),
    close: () => client.close(),
  };
}
