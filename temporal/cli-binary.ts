// Finds (or builds, once per machine) the pinned Temporal CLI that runs our dev server.
// Order: LLMGW_TEMPORAL_BIN, a `temporal` on PATH of the pinned version, the cache
// outside the checkout, and finally `go install` into that cache.
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, renameSync, rmSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

const execFileAsync = promisify(execFile);

export const TEMPORAL_CLI_VERSION = '1.5.1';
const GO_PACKAGE = `github.com/temporalio/cli/cmd/temporal@v${TEMPORAL_CLI_VERSION}`;

export function temporalCacheDir(): string {
  const base = process.env.XDG_CACHE_HOME || join(homedir(), '.cache');
  return join(base, 'llmgw', `temporal-${TEMPORAL_CLI_VERSION}`);
}

async function versionOf(binary: string): Promise<string | undefined> {
  try {
    const { stdout } = await execFileAsync(binary, ['--version'], { timeout: 15_000 });
    // "temporal version 1.5.1 (Server 1.29.1, UI 2.42.1)"
    return /version\s+(\S+)/.exec(stdout)?.[1];
  } catch {
    return undefined;
  }
}

async function onPath(command: string): Promise<string | undefined> {
  for (const dir of (process.env.PATH ?? '').split(':')) {
    if (!dir) continue;
    const candidate = join(dir, command);
    if (existsSync(candidate)) return candidate;
  }
  return undefined;
}

export type Log = (line: string) => void;

/** Returns the path of a Temporal CLI of the pinned version, building it if it must. */
export async function ensureTemporalCli(log: Log = (line) => console.error(line)): Promise<string> {
  const explicit = process.env.LLMGW_TEMPORAL_BIN;
  if (explicit) {
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

  const go = await onPath('go');
  if (!go) {
    throw new Error(
      [
        `llmgw needs the Temporal CLI ${TEMPORAL_CLI_VERSION} and found none.`,
        `Either install Go (1.22 or newer; e.g. \`apt-get install golang\`) so that llmgw can build it with`,
        `  go install ${GO_PACKAGE}`,
        `or put a temporal ${TEMPORAL_CLI_VERSION} binary on PATH, or set LLMGW_TEMPORAL_BIN to one.`,
      ].join('\n'),
    );
  }

  log(`llmgw: building the Temporal CLI ${TEMPORAL_CLI_VERSION} with \`go install ${GO_PACKAGE}\` into ${temporalCacheDir()}`);
  log('llmgw: this takes a few minutes the first time; later runs and other clones reuse the cached binary.');
  const started = Date.now();
  mkdirSync(temporalCacheDir(), { recursive: true });
  // Build into a private folder and rename, so that two clones building at once never
  // see a half-written binary.
  const buildDir = mkdtempSync(join(temporalCacheDir(), 'build-'));
  try {
    // go install leaves the CLI's version as 0.0.0-DEV; stamp it as the release build does,
    // so that `temporal --version` (and our own check above) reads the pinned version.
    const ldflags = `-X github.com/temporalio/cli/temporalcli.Version=${TEMPORAL_CLI_VERSION}`;
    await execFileAsync(go, ['install', '-ldflags', ldflags, GO_PACKAGE], {
      env: { ...process.env, GOBIN: buildDir, CGO_ENABLED: '0' },
      timeout: 30 * 60_000,
      maxBuffer: 64 * 1024 * 1024,
    });
    renameSync(join(buildDir, 'temporal'), cached);
  } catch (error) {
    const detail = error instanceof Error ? error.message : String(error);
    throw new Error(
      `building the Temporal CLI failed: ${detail}\nRun \`go install ${GO_PACKAGE}\` by hand to see why, or set LLMGW_TEMPORAL_BIN.`,
      { cause: error },
    );
  } finally {
    rmSync(buildDir, { recursive: true, force: true });
  }
  log(`llmgw: built ${cached} in ${Math.round((Date.now() - started) / 1000)} s`);
  return cached;
}
