// llmgw's own PostgreSQL cluster for Temporal when LLMGW_POSTGRES_URL is not set: initdb'd
// into <stateDir>/postgres/data, listening on loopback only on a free port, password-protected,
// and started and stopped with pg_ctl. It touches nothing of the machine's own clusters.
import { randomBytes } from 'node:crypto';
import { chownSync, existsSync, mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync, appendFileSync } from 'node:fs';
import { join } from 'node:path';
import { findFreePort } from '../../common/ports.js';
import { lastLines, runProgram, withoutPostgresEnv } from './exec.js';
import type { PostgresTarget } from './target.js';

export const POSTGRES_BIN_ENV = 'LLMGW_POSTGRES_BIN_DIR';
const USER = 'temporal';

export interface PrivateClusterPaths {
  root: string;
  dataDir: string;
  passwordFile: string;
  logFile: string;
}

export function privateClusterPaths(stateDir: string): PrivateClusterPaths {
  const root = join(stateDir, 'postgres');
  return { root, dataDir: join(root, 'data'), passwordFile: join(root, 'password'), logFile: join(root, 'postgres.log') };
}

const USE_URL = 'or set LLMGW_POSTGRES_URL=postgres://USER:PASSWORD@HOST:5432/temporal to use a PostgreSQL that is already running.';
const WHAT_TO_DO = [
  `Install PostgreSQL's server programs (e.g. \`apt-get install postgresql\`), or set ${POSTGRES_BIN_ENV} to the folder holding initdb and pg_ctl,`,
  USE_URL,
].join('\n');

/** The folder with initdb and pg_ctl: LLMGW_POSTGRES_BIN_DIR, the newest Debian-style /usr/lib/postgresql/N/bin, or PATH. */
export function findPostgresBinDir(): string {
  const has = (dir: string): boolean => existsSync(join(dir, 'initdb')) && existsSync(join(dir, 'pg_ctl'));
  const explicit = process.env[POSTGRES_BIN_ENV];
  if (explicit) {
    if (!has(explicit)) throw new Error(`${POSTGRES_BIN_ENV}=${explicit} holds no initdb and pg_ctl.\n${WHAT_TO_DO}`);
    return explicit;
  }
  const debian = '/usr/lib/postgresql';
  if (existsSync(debian)) {
    const versions = readdirSync(debian)
      .filter((name) => /^\d+$/.test(name))
      .sort((a, b) => Number(b) - Number(a));
    for (const version of versions) if (has(join(debian, version, 'bin'))) return join(debian, version, 'bin');
  }
  for (const dir of (process.env.PATH ?? '').split(':')) if (dir && has(dir)) return dir;
  throw new Error(`llmgw found no PostgreSQL server programs (initdb, pg_ctl) to run its own cluster.\n${WHAT_TO_DO}`);
}

/** PostgreSQL refuses to run as root: as root, its programs run as the `postgres` user. */
function runAsUser(): { uid: number; gid: number } | undefined {
  if (process.getuid?.() !== 0) return undefined;
  const line = readFileSync('/etc/passwd', 'utf8')
    .split('\n')
    .find((entry) => entry.startsWith('postgres:'));
  const [, , uid, gid] = line?.split(':') ?? [];
  if (!uid || !gid)
    throw new Error(
      `PostgreSQL refuses to run as root and this machine has no \`postgres\` user to run it as.\nRun llmgw as an ordinary user, or ${WHAT_TO_DO}`,
    );
  return { uid: Number(uid), gid: Number(gid) };
}

function pgEnv(): NodeJS.ProcessEnv {
  return withoutPostgresEnv({ LC_ALL: 'C', LANG: 'C' });
}

/** The port a running cluster listens on (line 4 of postmaster.pid), if it runs. */
async function runningPort(
  binDir: string,
  paths: PrivateClusterPaths,
  user: { uid: number; gid: number } | undefined,
): Promise<number | undefined> {
  if (!existsSync(join(paths.dataDir, 'PG_VERSION'))) return undefined;
  const status = await runProgram(join(binDir, 'pg_ctl'), ['status', '-D', paths.dataDir], { env: pgEnv(), user, timeoutMs: 15_000 });
  if (status.code !== 0) return undefined;
  const lines = readFileSync(join(paths.dataDir, 'postmaster.pid'), 'utf8').split('\n');
  const port = Number(lines[3]);
  return Number.isInteger(port) && port > 0 ? port : undefined;
}

async function initCluster(binDir: string, paths: PrivateClusterPaths, user: { uid: number; gid: number } | undefined): Promise<void> {
  rmSync(paths.dataDir, { recursive: true, force: true });
  mkdirSync(paths.root, { recursive: true, mode: 0o700 });
  writeFileSync(paths.passwordFile, randomBytes(18).toString('base64url') + '\n', { mode: 0o600 });
  if (user) for (const path of [paths.root, paths.passwordFile]) chownSync(path, user.uid, user.gid);
  const init = await runProgram(
    join(binDir, 'initdb'),
    ['-D', paths.dataDir, '-U', USER, '--auth=scram-sha-256', `--pwfile=${paths.passwordFile}`, '-E', 'UTF8', '--locale=C'],
    { env: pgEnv(), user, timeoutMs: 120_000 },
  );
  if (init.code !== 0) {
    rmSync(paths.dataDir, { recursive: true, force: true });
    throw new Error(
      `initdb of llmgw's PostgreSQL cluster in ${paths.dataDir} failed${init.timedOut ? ' (timed out)' : ''}:\n${lastLines(init.output)}\n` +
        (user ? `It runs as the postgres user, which must be able to reach ${paths.root}.\n` : '') +
        WHAT_TO_DO,
    );
  }
  // Loopback TCP only and no Unix socket: nothing outside this machine can connect, and no
  // socket folder (often root-owned, often too long a path) is needed.
  appendFileSync(
    join(paths.dataDir, 'postgresql.conf'),
    "\n# llmgw\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = ''\nmax_connections = 300\n",
  );
}

export interface PrivateCluster {
  target: PostgresTarget;
  /** True when this call started it (and so its stop should stop it). */
  startedHere: boolean;
  paths: PrivateClusterPaths;
}

/** Creates the cluster if there is none, starts it if it is not running, and returns how to reach it. */
export async function ensurePrivateCluster(stateDir: string, log: (line: string) => void): Promise<PrivateCluster> {
  const binDir = findPostgresBinDir();
  const user = runAsUser();
  const paths = privateClusterPaths(stateDir);
  const target = (port: number): PostgresTarget => ({
    host: '127.0.0.1',
    port,
    user: USER,
    password: readFileSync(paths.passwordFile, 'utf8').trim(),
    database: 'temporal',
    tls: { enabled: false },
    source: `llmgw's PostgreSQL (${paths.dataDir}, 127.0.0.1:${port})`,
  });

  const already = await runningPort(binDir, paths, user);
  if (already) return { target: target(already), startedHere: false, paths };

  if (!existsSync(join(paths.dataDir, 'PG_VERSION'))) {
    log(`llmgw: creating a PostgreSQL cluster in ${paths.dataDir} (${binDir})`);
    await initCluster(binDir, paths, user);
  } else if (!existsSync(paths.passwordFile)) {
    throw new Error(
      `llmgw's PostgreSQL in ${paths.dataDir} has lost its password file (${paths.passwordFile}); ` +
        `delete the cluster with \`llmgw temporal stop-postgres --state-dir ${stateDir} --purge\` to start afresh.`,
    );
  }
  const port = await findFreePort();
  if (!existsSync(paths.logFile)) {
    writeFileSync(paths.logFile, '');
    if (user) chownSync(paths.logFile, user.uid, user.gid);
  }
  const start = await runProgram(
    join(binDir, 'pg_ctl'),
    ['start', '-D', paths.dataDir, '-l', paths.logFile, '-w', '-t', '60', '-o', `-p ${port}`],
    { env: pgEnv(), user, timeoutMs: 90_000 },
  );
  if (start.code !== 0) {
    throw new Error(
      `llmgw's PostgreSQL (${paths.dataDir}) did not start${start.timedOut ? ' within 90 s' : ''}:\n${lastLines(start.output)}\n` +
        `Its log (${paths.logFile}) ends:\n${lastLines(readLog(paths.logFile))}\n` +
        `To start from a fresh cluster, delete it with \`llmgw temporal stop-postgres --state-dir ${stateDir} --purge\`,\n${USE_URL}`,
    );
  }
  log(`llmgw: PostgreSQL ready on 127.0.0.1:${port} (data ${paths.dataDir})`);
  return { target: target(port), startedHere: true, paths };
}

/** Stops the private cluster if it runs (fast shutdown: open sessions are ended, data is kept). */
export async function stopPrivateCluster(stateDir: string): Promise<boolean> {
  const paths = privateClusterPaths(stateDir);
  if (!existsSync(join(paths.dataDir, 'PG_VERSION'))) return false;
  const binDir = findPostgresBinDir();
  const user = runAsUser();
  if (!(await runningPort(binDir, paths, user))) return false;
  const stop = await runProgram(join(binDir, 'pg_ctl'), ['stop', '-D', paths.dataDir, '-m', 'fast', '-w', '-t', '60'], {
    env: pgEnv(),
    user,
    timeoutMs: 90_000,
  });
  if (stop.code !== 0) throw new Error(`pg_ctl stop of ${paths.dataDir} failed:\n${lastLines(stop.output)}`);
  return true;
}

/** Deletes the private cluster's files; stop it first. */
export function removePrivateCluster(stateDir: string): void {
  rmSync(privateClusterPaths(stateDir).root, { recursive: true, force: true });
}

function readLog(file: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return '(no log)';
  }
}
