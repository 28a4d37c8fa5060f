// A simulated fleet for end-to-end tests: `llmgw sim-fleet` as a real process, its control
// socket, and its engine host (which outlives it, as engines outlive agents, so it is ended
// here by pid once the test is done).
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { signalGroup } from '../../agent/supervisor/processes/proc.js';
import { controlRequest } from '../../sim/control.js';
import { spawnLlmgw, type LlmgwProcess } from './processes.js';

export interface EngineRow {
  nodeId: string;
  pid: number;
  startTicks: string;
  shardId: string;
  port: number;
  cudaVisibleDevices: string;
}

export interface SimFleet {
  proc: LlmgwProcess;
  stateDir: string;
  nodeIds: string[];
  control(line: string): Promise<Record<string, unknown>>;
  engines(): Promise<EngineRow[]>;
  /** The engine host's pid (every virtual engine lives there). */
  enginesPid(): Promise<number>;
}

export interface SimFleetOptions {
  hosts: number;
  prefix: string;
  inventory: string;
  /** Reuse a fleet's state dir: a restart. */
  stateDir?: string;
  portBase: number;
  extra?: string[];
}

const engineHosts = new Set<number>();

/** Starts `llmgw sim-fleet` and resolves once every host is up. */
export async function startSimFleet(options: SimFleetOptions): Promise<SimFleet> {
  const stateDir = options.stateDir ?? mkdtempSync(join(tmpdir(), 'llmgw-sim-fleet-'));
  const proc = spawnLlmgw([
    'sim-fleet',
    '--hosts',
    String(options.hosts),
    '--gpus',
    options.inventory,
    '--state-dir',
    stateDir,
    '--node-prefix',
    options.prefix,
    '--port-base',
    String(options.portBase),
    ...(options.extra ?? []),
  ]);
  await proc.waitForOutput(new RegExp(`sim-fleet: ${options.hosts} of ${options.hosts} hosts up`), 90_000);
  const socket = join(stateDir, 'control.sock');
  const control = (line: string): Promise<Record<string, unknown>> => controlRequest(socket, line);
  const fleet: SimFleet = {
    proc,
    stateDir,
    nodeIds: Array.from({ length: options.hosts }, (_, i) => `${options.prefix}${i}`),
    control,
    engines: async () => (await control('engines')).engines as EngineRow[],
    enginesPid: async () => Number((await control('status')).enginesPid),
  };
  engineHosts.add(await fleet.enginesPid());
  return fleet;
}

/** Ends every engine host the tests started (a power cut of their fleets). */
export function killEngineHosts(): void {
  for (const pid of engineHosts) signalGroup(pid, 'SIGKILL');
  engineHosts.clear();
}

/** A free block of ports for a fleet's engines, away from other tests' random ranges. */
export function fleetPortBase(): number {
  return 50_000 + Math.floor(Math.random() * 100) * 100;
}
