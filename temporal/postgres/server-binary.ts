// Finds (or builds, once per machine) the pinned Temporal server and its SQL schema tool,
// for running llmgw on PostgreSQL the way a self-hosted cluster runs. Same order as the CLI:
// explicit paths, PATH, the cache in ~/.cache/llmgw, and finally `go install` into that cache.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { goInstallIntoCache, llmgwCacheDir, onPath, versionOf, type Log } from '../go-install.js';

/** The server the pinned CLI 1.5.1 embeds in start-dev, so the dev server and PostgreSQL run the same Temporal. */
export const TEMPORAL_SERVER_VERSION = '1.29.1';
const MODULE = `go.temporal.io/server`;

export interface ServerBinaries {
  server: string;
  sqlTool: string;
}

export function temporalServerCacheDir(): string {
  return llmgwCacheDir(`temporal-server-${TEMPORAL_SERVER_VERSION}`);
}

// Named as in Temporal's release archives, so a downloaded release can stand in for the build.
const NAMES = { server: 'temporal-server', sqlTool: 'temporal-sql-tool' } as const;
const ENV = { server: 'LLMGW_TEMPORAL_SERVER_BIN', sqlTool: 'LLMGW_TEMPORAL_SQL_TOOL_BIN' } as const;

async function find(which: keyof ServerBinaries, log: Log): Promise<string | undefined> {
  const explicit = process.env[ENV[which]];
  if (explicit) {
    const version = await versionOf(explicit);
    if (!version)
      throw new Error(
        `${ENV[which]}=${explicit} does not run (\`${explicit} --version\` failed). Point it at a ${NAMES[which]} binary, or unset it.`,
      );
    if (version !== TEMPORAL_SERVER_VERSION)
      log(`llmgw: using ${ENV[which]}=${explicit} (version ${version}; llmgw is tested with ${TEMPORAL_SERVER_VERSION})`);
    return explicit;
  }
  const fromPath = await onPath(NAMES[which]);
  if (fromPath && (await versionOf(fromPath)) === TEMPORAL_SERVER_VERSION) return fromPath;
  const cached = join(temporalServerCacheDir(), NAMES[which]);
  if (existsSync(cached) && (await versionOf(cached)) === TEMPORAL_SERVER_VERSION) return cached;
  return undefined;
}

/** Returns the server and SQL tool of the pinned version, building both (one `go install`) if either is missing. */
export async function ensureTemporalServer(log: Log = (line) => console.error(line)): Promise<ServerBinaries> {
  const server = await find('server', log);
  const sqlTool = await find('sqlTool', log);
  if (server && sqlTool) return { server, sqlTool };
  await goInstallIntoCache(
    {
      what: `the Temporal server ${TEMPORAL_SERVER_VERSION} and its SQL tool`,
      packages: [`${MODULE}/cmd/server@v${TEMPORAL_SERVER_VERSION}`, `${MODULE}/cmd/tools/sql@v${TEMPORAL_SERVER_VERSION}`],
      cacheDir: temporalServerCacheDir(),
      binaries: { server: NAMES.server, sql: NAMES.sqlTool },
      otherwise: `Or put ${NAMES.server} and ${NAMES.sqlTool} ${TEMPORAL_SERVER_VERSION} (from a Temporal server release) on PATH, or set ${ENV.server} and ${ENV.sqlTool}.`,
    },
    log,
  );
  return {
    server: server ?? join(temporalServerCacheDir(), NAMES.server),
    sqlTool: sqlTool ?? join(temporalServerCacheDir(), NAMES.sqlTool),
  };
}
