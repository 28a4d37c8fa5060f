// Runs the helper programs of the PostgreSQL setup (initdb, pg_ctl, the SQL tool) with a
// bound on every wait: a program that does not finish in time is killed with its group.
import { spawn } from 'node:child_process';

export interface RunOptions {
  env?: NodeJS.ProcessEnv;
  /** Run as this user (PostgreSQL refuses to run as root). */
  user?: { uid: number; gid: number };
  timeoutMs: number;
}

export interface RunResult {
  code: number | null;
  /** stdout and stderr together, in order. */
  output: string;
  timedOut: boolean;
}

export function runProgram(command: string, args: string[], options: RunOptions): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    // Its own process group: a timeout kills everything it started, and pg_ctl's postmaster
    // does not share the terminal's group, so Ctrl-C in a foreground llmgw does not reach it.
    const child = spawn(command, args, {
      env: options.env ?? process.env,
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
      ...(options.user ? { uid: options.user.uid, gid: options.user.gid } : {}),
    });
    let output = '';
    const append = (chunk: Buffer): void => {
      output += chunk.toString('utf8');
      if (output.length > 256 * 1024) output = output.slice(-128 * 1024);
    };
    child.stdout.on('data', append);
    child.stderr.on('data', append);
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      try {
        if (child.pid !== undefined) process.kill(-child.pid, 'SIGKILL');
      } catch {
        // Already gone.
      }
    }, options.timeoutMs);
    child.once('error', (error) => {
      clearTimeout(timer);
      reject(error);
    });
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, output, timedOut });
    });
  });
}

/** The last lines of a program's output, for error messages. */
export function lastLines(text: string, lines = 12): string {
  return text.trimEnd().split('\n').slice(-lines).join('\n');
}

/** The environment without PG* variables, so a user's PGHOST or PGDATA cannot redirect a private cluster's tools. */
export function withoutPostgresEnv(extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) if (!key.startsWith('PG')) env[key] = value;
  return { ...env, ...extra };
}

/** The environment without TEMPORAL_* variables: a user's settings for their own cluster must not reach this local one. */
export function withoutTemporalEnv(): NodeJS.ProcessEnv {
  return Object.fromEntries(Object.entries(process.env).filter(([key]) => !key.startsWith('TEMPORAL_')));
}
