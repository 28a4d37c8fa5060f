// Teardown of Temporal on PostgreSQL: stopping what a start left running (found through
// its state file), and with purge deleting what llmgw created, and nothing else.
import { rmSync } from 'node:fs';
import { resolve } from 'node:path';
import { defaultStateDir } from '../dev-server.js';
import type { Log } from '../go-install.js';
import { removePrivateCluster, stopPrivateCluster } from './private-cluster.js';
import { dropDatabases } from './schema.js';
import { ensureTemporalServer } from './server-binary.js';
import { killServer, liveServerPid, readState, serverRoot, type PostgresTemporalState } from './state.js';
import { parsePostgresUrl, URL_ENV } from './target.js';

/** The private cluster's files, or the databases llmgw created on LLMGW_POSTGRES_URL (stop the server first). */
export async function purgeWhatWasCreated(
  stateDir: string,
  state: PostgresTemporalState,
  sqlTool: string,
  rawUrl: string | undefined,
): Promise<void> {
  if (state.postgres.kind === 'private') {
    await stopPrivateCluster(stateDir);
    removePrivateCluster(stateDir);
  } else if (state.postgres.createdDatabases.length) {
    if (!rawUrl)
      throw new Error(`set ${URL_ENV} to the PostgreSQL at ${state.postgres.server} to drop ${state.postgres.createdDatabases.join(', ')}`);
    const target = parsePostgresUrl(rawUrl);
    if (`${target.host}:${target.port}` !== state.postgres.server)
      throw new Error(
        `${URL_ENV} names ${target.host}:${target.port}, but llmgw created its databases on ${state.postgres.server}; not dropping anything`,
      );
    await dropDatabases(sqlTool, target, state.postgres.createdDatabases);
  }
  rmSync(serverRoot(stateDir), { recursive: true, force: true });
}

/** `llmgw temporal stop-postgres`: stops what a start left running, found through its state file. */
export async function stopPostgresTemporal(options: { stateDir?: string; purge?: boolean; log?: Log } = {}): Promise<void> {
  const log = options.log ?? ((line: string) => console.log(line));
  const stateDir = resolve(options.stateDir ?? defaultStateDir());
  const state = readState(stateDir);
  const pid = state && liveServerPid(state, serverRoot(stateDir));
  if (pid) {
    await killServer(pid);
    log(`stopped the Temporal server (pid ${pid})`);
  }
  if (await stopPrivateCluster(stateDir)) log(`stopped llmgw's PostgreSQL (${stateDir}/postgres)`);
  if (options.purge) {
    const purgeState: PostgresTemporalState = state ?? { address: '', namespace: '', numHistoryShards: 0, postgres: { kind: 'private' } };
    const sqlTool = purgeState.postgres.kind === 'url' ? (await ensureTemporalServer()).sqlTool : '';
    await purgeWhatWasCreated(stateDir, purgeState, sqlTool, process.env[URL_ENV]);
    log(
      purgeState.postgres.kind === 'private'
        ? `removed ${stateDir}/postgres and ${serverRoot(stateDir)}`
        : `dropped ${purgeState.postgres.createdDatabases.join(', ') || 'nothing (llmgw created no database there)'}; removed ${serverRoot(stateDir)}`,
    );
  }
}
