// A stand-in Temporal frontend for the router's shutdown test: a real gRPC server on loopback
// that answers GetSystemInfo, hands a router one route table through the watchRoutes Update,
// holds its later long polls, and on `fail()` answers every call with RESOURCE_EXHAUSTED, which
// the client's retry interceptor retries after a second or more: a Temporal call in retry.
import * as grpc from '@grpc/grpc-js';
import { temporal } from '@temporalio/proto';
import type { RouteTable } from '../../workflows/routes/definitions.js';

const SERVICE = '/temporal.api.workflowservice.v1.WorkflowService';
const raw = (b: Buffer) => b;

export interface FakeTemporal {
  address: string;
  /** Every call from now on but GetSystemInfo (and every long poll held) fails with RESOURCE_EXHAUSTED. */
  fail(): void;
  /** Calls received, by method. */
  calls: Record<string, number>;
  close(): Promise<void>;
}

function jsonPayload(value: unknown): temporal.api.common.v1.IPayload {
  return { metadata: { encoding: Buffer.from('json/plain') }, data: Buffer.from(JSON.stringify(value)) };
}

export async function startFakeTemporal(table: RouteTable): Promise<FakeTemporal> {
  const server = new grpc.Server();
  const calls: Record<string, number> = {};
  let failing = false;
  const held: Array<grpc.sendUnaryData<Buffer>> = [];
  const exhausted = { code: grpc.status.RESOURCE_EXHAUSTED, details: 'the stand-in Temporal is refusing calls' };
  const unary = (method: string, answer: (request: Buffer, done: grpc.sendUnaryData<Buffer>) => void) =>
    server.register<Buffer, Buffer>(
      `${SERVICE}/${method}`,
      (call: grpc.ServerUnaryCall<Buffer, Buffer>, done: grpc.sendUnaryData<Buffer>) => {
        calls[method] = (calls[method] ?? 0) + 1;
        if (failing && method !== 'GetSystemInfo') return done(exhausted);
        answer(call.request, done);
      },
      raw,
      raw,
      'unary',
    );
  unary('GetSystemInfo', (_req, done) =>
    done(null, Buffer.from(temporal.api.workflowservice.v1.GetSystemInfoResponse.encode({ capabilities: {} }).finish())),
  );
  let answered = false;
  unary('UpdateWorkflowExecution', (req, done) => {
    // The first long poll gets the table; the next ones wait, as they would for a change.
    if (answered) return void held.push(done);
    answered = true;
    const request = temporal.api.workflowservice.v1.UpdateWorkflowExecutionRequest.decode(req);
    const response = temporal.api.workflowservice.v1.UpdateWorkflowExecutionResponse.encode({
      updateRef: { workflowExecution: { workflowId: 'routes', runId: 'fake-run' }, updateId: request.request?.meta?.updateId ?? '' },
      outcome: { success: { payloads: [jsonPayload(table)] } },
      stage: temporal.api.enums.v1.UpdateWorkflowExecutionLifecycleStage.UPDATE_WORKFLOW_EXECUTION_LIFECYCLE_STAGE_COMPLETED,
    });
    done(null, Buffer.from(response.finish()));
  });
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
  );
  return {
    address: `127.0.0.1:${port}`,
    calls,
    fail() {
      failing = true;
      for (const done of held.splice(0)) done(exhausted);
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const done of held.splice(0)) done(exhausted);
        server.tryShutdown(() => resolve());
        setTimeout(() => server.forceShutdown(), 2000).unref();
      }),
  };
}
