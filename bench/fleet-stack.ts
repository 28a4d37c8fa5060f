// bench:fleet's stack: Temporal, control workers and `llmgw sim-fleet` with its hosts in one
// process, ended with the others a stack started (bench/stack.ts).
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, mkdirSync, mkdtempSync, openSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Client } from '@temporalio/client';
import { signalGroup } from '../agent/supervisor/processes/proc.js';
import { controlRequest } from '../sim/control.js';
import {
  BENCH_DIR,
  BIN,
  connectClient,
  profileEnv,
  stackEnv,
  started,
  startTemporal,
  startWorkers,
  type BenchTemporal,
  type TemporalKind,
} from './stack.js';

export interface FleetStack {
  temporal: BenchTemporal;
  client: Client;
  workers: ChildProcess[];
  /** The sim-fleet process and its engine host. */
  fleetPid: number;
  enginesPid: number;
  logFile: string;
  control(line: string): Promise<Record<string, unknown>>;
  stop(): Promise<void>;
}

/** Temporal, `workers` control workers, and `llmgw sim-fleet` with its hosts all up. */
export async function startFleetStack(options: { temporal: TemporalKind; workers: number; fleetArgs: string[] }): Promise<FleetStack> {
  const temporal = await startTemporal(options.temporal);
  const env = stackEnv(temporal);
  const children: ChildProcess[] = [];
  const workers = await startWorkers(children, options.workers, env);
  const stateDir = mkdtempSync(join(tmpdir(), 'llmgw-bench-fleet-'));
  mkdirSync(BENCH_DIR, { recursive: true });
  const logFile = join(BENCH_DIR, `sim-fleet-${Date.now().toString(36)}.log`);
  const fd = openSync(logFile, 'a');
  const fleet = spawn(process.execPath, [BIN, 'sim-fleet', '--state-dir', stateDir, ...options.fleetArgs], {
    env: { ...process.env, ...env, ...profileEnv(), LLMGW_LOG_LEVEL: 'warn' },
    stdio: ['ignore', fd, fd],
    detached: true,
  });
  closeSync(fd);
  children.push(fleet);
  if (fleet.pid) started.groups.add(fleet.pid);
  const socket = join(stateDir, 'control.sock');
  const control = (line: string): Promise<Record<string, unknown>> => controlRequest(socket, line, 120_000);
  let enginesPid = 0;
  for (const deadline = Date.now() + 600_000; ;) {
    const status = await control('status').catch(() => undefined);
    const hosts = (status?.hosts ?? []) as { state: string }[];
    if (status) enginesPid = Number(status.enginesPid);
    if (enginesPid > 0) started.groups.add(enginesPid);
    if (hosts.length > 0 && hosts.every((h) => h.state === 'up' || h.state === 'failed')) break;
    if (fleet.exitCode !== null || Date.now() > deadline) throw new Error(`sim-fleet did not bring its hosts up (log ${logFile})`);
    await new Promise((r) => setTimeout(r, 1_000));
  }
  const { client, connection } = await connectClient(temporal);
  return {
    temporal,
    client,
    workers,
    fleetPid: fleet.pid!,
    enginesPid,
    logFile,
    control,
    async stop() {
      await connection.close();
      for (const child of children) if (child.pid && child.exitCode === null) signalGroup(child.pid, 'SIGKILL');
      // The engine host outlives sim-fleet by design; it is ended last, like a power cut.
      if (enginesPid > 0) signalGroup(enginesPid, 'SIGKILL');
      await temporal.stop();
    },
  };
}
