// Finds (or builds, once per machine) the pinned Temporal CLI that runs our dev server.
// Order: LLMGW_TEMPORAL_BIN, a `temporal` on PATH of the pinned version, the cache
// outside the checkout, and finally `go install` into that cache.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { goInstallIntoCache, llmgwCacheDir, onPath, versionOf, type Log } from './go-install.js';

export type { Log } from './go-install.js';

export const TEMPORAL_CLI_VERSION = '1.5.1';
const GO_PACKAGE = `github.com/temporalio/cli/cmd/temporal@v${TEMPORAL_CLI_VERSION}`;

export function temporalCacheDir(): string {
  return llmgwCacheDir(`temporal-${TEMPORAL_CLI_VERSION}`);
}

/** Returns the path of a Temporal CLI of the pinned version, building it if it must. */
export async function ensureTemporalCli(log: Log = (line) => console.error(line)): Promise<string> {
  const explicit = process.env.LLMGW_TEMPORAL_BIN;
  if (explicit) {
    // "temporal version 1.5.1 (Server 1.29.1, UI 2.42.1)"
    const version = await versionOf(explicit);
    if (!version)
      throw new Error(
        `LLMGW_TEMPORAL_BIN=${explicit} does not run (\`${explicit} --version\` failed). Point it at a Temporal CLI binary, or unset it.`,
      );
    if (version !== TEMPORAL_CLI_VERSION)
      log(`llmgw: using LLMGW_TEMPORAL_BIN=${explicit} (version ${version}; llmgw is tested with ${TEMPORAL_CLI_VERSION})`);
    return explicit;
  }

  const fromPath = await onPath('temporal');
  if (fromPath && (await versionOf(fromPath)) === TEMPORAL_CLI_VERSION) return fromPath;

  const cached = join(temporalCacheDir(), 'temporal');
  if (existsSync(cached) && (await versionOf(cached)) === TEMPORAL_CLI_VERSION) return cached;

  await goInstallIntoCache(
    {
      what: `the Temporal CLI ${TEMPORAL_CLI_VERSION}`,
      packages: [GO_PACKAGE],
      // go install leaves the CLI's version as 0.0.0-DEV; stamp it as the release build does,
      // so that `temporal --version` (and our own check above) reads the pinned version.
      ldflags: `-X github.com/temporalio/cli/temporalcli.Version=${TEMPORAL_CLI_VERSION}`,
      cacheDir: temporalCacheDir(),
      binaries: { temporal: 'temporal' },
      otherwise: `Or put a temporal ${TEMPORAL_CLI_VERSION} binary on PATH, or set LLMGW_TEMPORAL_BIN to one.`,
    },
    log,
  );
  return cached;
}
