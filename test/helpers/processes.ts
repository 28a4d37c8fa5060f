// Real llmgw processes for end-to-end tests: `llmgw agent`, `llmgw worker`, and the
// engines they start. Every process a test starts is ended by pid or process group.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { tableName } from '../../agent/host/rendezvous-firewall.js';
import { listPids, readEnviron, signalGroup } from '../../agent/supervisor/processes/proc.js';
import { testCatalogKeyFile, testPublicKeyFile } from './catalog-key.js';
import { temporalAddress } from './temporal.js';

const LLMGW_BIN = join(__dirname, '../../bin/llmgw.js');
const running = new Set<LlmgwProcess>();
/** One claims directory for every test agent of this user (agents check it is theirs and 0700). */
const SHARED_PORT_CLAIMS = join(tmpdir(), `llmgw-test-port-claims-${process.getuid?.() ?? 0}`);

export interface LlmgwProcess {
  pid: number;
  child: ChildProcess;
  output(): string;
  waitForOutput(pattern: RegExp, timeoutMs?: number): Promise<string>;
  exited: Promise<number | null>;
  /** SIGTERM, then SIGKILL after the grace. */
  stop(graceMs?: number): Promise<void>;
  kill9(): Promise<void>;
}

/** `bin`: another build's bin/llmgw.js (test/helpers/release-build.ts); `wrap`: a command to run llmgw under. */
export function spawnLlmgw(
  args: string[],
  env: Record<string, string> = {},
  options: {
    cwd?: string;
    /** Another build's bin/llmgw.js; this checkout's by default. */
    bin?: string;
    /** A command to run llmgw under, e.g. `ip netns exec NS` (it must exec, keeping the pid). */
    wrap?: string[];
  } = {},
): LlmgwProcess {
  const argv = [...(options.wrap ?? []), process.execPath, options.bin ?? LLMGW_BIN, ...args];
  const child = spawn(argv[0]!, argv.slice(1), {
    ...(options.cwd ? { cwd: options.cwd } : {}),
    // Workers sign with the run's private key, agents and routers verify with its public one,
    // as a real deployment does; many run side by side, so none serves /metrics unless a test
    // asks (--metrics-addr).
    env: {
      ...process.env,
      TEMPORAL_ADDRESS: temporalAddress(),
      LLMGW_CATALOG_KEY_FILE: testCatalogKeyFile(),
      LLMGW_CATALOG_PUBLIC_KEY_FILE: testPublicKeyFile(),
      // Every agent a test starts enrolls its own key, as `llmgw up`'s does (docs/gpu-hosts.md);
      // a test of enrollment itself sets it to ''.
      LLMGW_AGENT_ENROLL_KEY_FILE: testCatalogKeyFile(),
      LLMGW_METRICS_ADDR: 'off',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  let text = '';
  child.stdout?.on('data', (chunk: Buffer) => (text += chunk.toString()));
  child.stderr?.on('data', (chunk: Buffer) => (text += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  let done = false;
  void exited.then(() => (done = true));
  const proc: LlmgwProcess = {
    pid: child.pid!,
    child,
    output: () => text,
    async waitForOutput(pattern, timeoutMs = 30_000) {
      const deadline = Date.now() + timeoutMs;
      while (Date.now() < deadline) {
        const match = pattern.exec(text);
        if (match) return match[0];
        if (done) break;
        await sleep(100);
      }
      throw new Error(`llmgw ${args[0]} did not print ${pattern} within ${timeoutMs} ms; output:\n${text.slice(-3000)}`);
    },
    exited,
    async stop(graceMs = 20_000) {
      if (done) return;
      signalGroup(child.pid!, 'SIGTERM');
      const timer = setTimeout(() => signalGroup(child.pid!, 'SIGKILL'), graceMs);
      await exited;
      clearTimeout(timer);
      running.delete(proc);
    },
    async kill9() {
      if (done) return;
      signalGroup(child.pid!, 'SIGKILL');
      await exited;
      running.delete(proc);
    },
  };
  running.add(proc);
  return proc;
}

export async function stopAll(): Promise<void> {
  await Promise.all([...running].map((proc) => proc.stop(5_000)));
}

/** Engine processes (any role) that carry one of these node ids in LLMGW_NODE_ID. */
export function enginesOf(nodeIds: string[]): { pid: number; env: Record<string, string> }[] {
  const found: { pid: number; env: Record<string, string> }[] = [];
  for (const pid of listPids()) {
    const env = readEnviron(pid);
    if (env?.LLMGW_NODE_ID && nodeIds.includes(env.LLMGW_NODE_ID)) found.push({ pid, env });
  }
  return found;
}

/** Ends every engine of these nodes (their own process groups). */
export async function killEnginesOf(nodeIds: string[]): Promise<void> {
  for (const { pid } of enginesOf(nodeIds)) signalGroup(pid, 'SIGKILL');
  const deadline = Date.now() + 5_000;
  while (enginesOf(nodeIds).length && Date.now() < deadline) await sleep(100);
  removeRendezvousTables(nodeIds);
}

/**
 * The nftables tables that these nodes' agents keep for a multi-node rank 0 (agent/host/
 * rendezvous-firewall.ts): engines killed here never had their stop, so their rules are ours to
 * remove. Only these tables, in this process's network namespace; nothing without root or nft.
 */
function removeRendezvousTables(nodeIds: string[]): void {
  if (process.getuid?.() !== 0 || nodeIds.length === 0) return;
  const script = nodeIds.map((id) => `table inet ${tableName(id)} {}\ndelete table inet ${tableName(id)}\n`).join('');
  try {
    execFileSync('nft', ['-f', '-'], { input: script, stdio: ['pipe', 'ignore', 'ignore'] });
  } catch {
    // No nft here: the agents made no tables either.
  }
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

export async function eventually<T>(
  what: string,
  probe: () => Promise<T | undefined> | T | undefined,
  timeoutMs = 30_000,
  intervalMs = 250,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  while (Date.now() < deadline) {
    try {
      const value = await probe();
      if (value !== undefined && value !== false) return value;
    } catch (error) {
      lastError = error;
    }
    await sleep(intervalMs);
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${lastError ? `: ${String(lastError)}` : ''}`);
}

export const E2E_CATALOG = join(__dirname, '../fixtures/catalog-e2e.yaml');

/** A real control worker (`llmgw worker`) with the e2e catalog, ready to serve. */
export async function spawnControlWorker(env: Record<string, string> = {}): Promise<LlmgwProcess> {
  const worker = spawnLlmgw(['worker', '--catalog', E2E_CATALOG], env);
  await worker.waitForOutput(/serving task queue llmgw/, 90_000);
  return worker;
}

/** Runs one `llmgw` command to completion (the CLI as a user runs it). */
export async function runLlmgw(
  args: string[],
  env: Record<string, string> = {},
  timeoutMs = 120_000,
): Promise<{ code: number | null; output: string }> {
  const proc = spawnLlmgw(args, env);
  const timer = setTimeout(() => void proc.kill9(), timeoutMs);
  const code = await proc.exited;
  clearTimeout(timer);
  running.delete(proc);
  return { code, output: proc.output() };
}

/** Starts a simulated agent and waits for it to register. */
export async function startSimAgent(
  nodeId: string,
  options: {
    inventory: string;
    stateDir?: string;
    range?: string;
    extra?: string[];
    env?: Record<string, string>;
    wait?: boolean;
    /** Another build's bin/llmgw.js. */
    bin?: string;
    /** Run under this command (a host's network namespace: test/helpers/netns). */
    wrap?: string[];
  },
): Promise<{ proc: LlmgwProcess; stateDir: string; range: string }> {
  const { mkdtempSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const stateDir = options.stateDir ?? mkdtempSync(join(tmpdir(), `llmgw-${nodeId}-`));
  const from = 30000 + Math.floor(Math.random() * 300) * 100;
  const range = options.range ?? `${from}-${from + 99}`;
  const proc = spawnLlmgw(
    [
      'agent',
      '--node-id',
      nodeId,
      '--gpus',
      options.inventory,
      '--state-dir',
      stateDir,
      // The admin API on its default Unix socket in the state dir (no token needed to test it).
      '--port-range',
      range,
      // Agents of one test process share a host, and so their port claims.
      '--port-claims-dir',
      SHARED_PORT_CLAIMS,
      '--presence-heartbeat-seconds',
      '5',
      ...(options.extra ?? []),
    ],
    options.env,
    { bin: options.bin, wrap: options.wrap },
  );
  if (options.wait !== false) await proc.waitForOutput(/registered with node\//, 60_000);
  return { proc, stateDir, range };
}

export const INVENTORIES = join(__dirname, '../fixtures/inventories');
