// Test helpers for talking to the harness's Temporal dev server and running workers.
import { inject } from 'vitest';
import { Client, Connection } from '@temporalio/client';
import { NativeConnection, Worker, type WorkerOptions } from '@temporalio/worker';
import { llmgwDataConverter } from '../../temporal/connection.js';

export function temporalAddress(): string {
  const address = inject('temporalAddress');
  if (!address) throw new Error('this test needs the Temporal dev server: run it without LLMGW_SKIP_TEMPORAL=1');
  return address;
}

export async function testClient(): Promise<{ client: Client; close(): Promise<void> }> {
  const connection = await Connection.connect({ address: temporalAddress() });
  const client = new Client({ connection, dataConverter: llmgwDataConverter() });
  return { client, close: () => connection.close() };
}

/** Runs a worker for the duration of `body`, then shuts it down. */
export async function withWorker<T>(options: Omit<WorkerOptions, 'connection' | 'dataConverter'>, body: () => Promise<T>): Promise<T> {
  const connection = await NativeConnection.connect({ address: temporalAddress() });
  const worker = await Worker.create({ ...options, connection, dataConverter: llmgwDataConverter() });
  try {
    return await worker.runUntil(body());
  } finally {
    await connection.close();
  }
}

export function uniqueId(prefix: string): string {
  return `${prefix}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 7)}`;
}
