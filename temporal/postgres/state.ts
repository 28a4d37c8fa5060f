// What a start of Temporal on PostgreSQL leaves behind for the next start and for
// `llmgw temporal stop-postgres`: <stateDir>/temporal-postgres/state.json (never a password).
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';

export const PostgresTemporalState = z.object({
  address: z.string(),
  namespace: z.string(),
  numHistoryShards: z.number().int().positive(),
  serverPid: z.number().int().positive().optional(),
  postgres: z.discriminatedUnion('kind', [
    z.object({ kind: z.literal('private') }),
    z.object({
      kind: z.literal('url'),
      /** host:port, to refuse a purge that names another server. */
      server: z.string(),
      database: z.string(),
      /** Databases llmgw created there, the only ones a purge drops. */
      createdDatabases: z.array(z.string()),
    }),
  ]),
});
export type PostgresTemporalState = z.infer<typeof PostgresTemporalState>;

export function serverRoot(stateDir: string): string {
  return join(stateDir, 'temporal-postgres');
}

function stateFile(stateDir: string): string {
  return join(serverRoot(stateDir), 'state.json');
}

export function readState(stateDir: string): PostgresTemporalState | undefined {
  const file = stateFile(stateDir);
  if (!existsSync(file)) return undefined;
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(file, 'utf8'));
  } catch {
    raw = undefined;
  }
  const parsed = PostgresTemporalState.safeParse(raw);
  if (!parsed.success) throw new Error(`${file} is not a state file llmgw understands; stop what it started by hand and remove it`);
  return parsed.data;
}

export function writeState(stateDir: string, state: PostgresTemporalState): void {
  const file = stateFile(stateDir);
  mkdirSync(serverRoot(stateDir), { recursive: true });
  writeFileSync(`${file}.tmp`, JSON.stringify(state, null, 2) + '\n');
  renameSync(`${file}.tmp`, file);
}

/** The recorded server pid, if that process still runs and is our server (not a reused pid). */
export function liveServerPid(state: PostgresTemporalState, root: string): number | undefined {
  if (!state.serverPid) return undefined;
  try {
    const cmdline = readFileSync(`/proc/${state.serverPid}/cmdline`, 'utf8').split('\0');
    return cmdline.includes(root) ? state.serverPid : undefined;
  } catch {
    return undefined;
  }
}

/** SIGTERM to the server's process group, SIGKILL after 20 s; resolves once it is gone. */
export async function killServer(pid: number, exited?: Promise<unknown>): Promise<void> {
  const signal = (name: NodeJS.Signals): void => {
    try {
      process.kill(-pid, name);
    } catch {
      // Already gone.
    }
  };
  signal('SIGTERM');
  const gone = exited ?? waitForExit(pid);
  const timer = setTimeout(() => signal('SIGKILL'), 20_000);
  await gone;
  clearTimeout(timer);
}

async function waitForExit(pid: number): Promise<void> {
  // Not our child (a server a detached start left): poll until the pid is gone, bounded by the SIGKILL above.
  for (let i = 0; i < 300; i++) {
    try {
      process.kill(pid, 0);
    } catch {
      return;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}
