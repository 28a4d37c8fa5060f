// Builds pinned Go programs (the Temporal CLI, server and SQL tool) once per machine into
// ~/.cache/llmgw, outside every checkout, so that clones and later runs reuse them.
// Builds share Go's own module and build caches, so the second build reuses what the first fetched.
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, renameSync, rmSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

const execFileAsync = promisify(execFile);

export type Log = (line: string) => void;

/** ~/.cache/llmgw/<name> (or under XDG_CACHE_HOME). */
export function llmgwCacheDir(name: string): string {
  const base = process.env.XDG_CACHE_HOME || join(homedir(), '.cache');
  return join(base, 'llmgw', name);
}

/** The version a program prints for `--version` ("temporal version 1.29.1" → "1.29.1"), or undefined if it does not run. */
export async function versionOf(binary: string): Promise<string | undefined> {
  try {
    const { stdout } = await execFileAsync(binary, ['--version'], { timeout: 15_000 });
    return /version\s+(\S+)/.exec(stdout)?.[1];
  } catch {
    return undefined;
  }
}

export async function onPath(command: string): Promise<string | undefined> {
  for (const dir of (process.env.PATH ?? '').split(':')) {
    if (!dir) continue;
    const candidate = join(dir, command);
    if (existsSync(candidate)) return candidate;
  }
  return undefined;
}

export interface GoBuild {
  /** For messages: "the Temporal CLI 1.5.1". */
  what: string;
  /** `go install` arguments: packages of one module at one version. */
  packages: string[];
  ldflags?: string;
  cacheDir: string;
  /** The name `go install` gives each program → its name in the cache. */
  binaries: Record<string, string>;
  /** What to do instead of building, for the message when Go is missing or the build fails. */
  otherwise: string;
}

/** Runs `go install` into a private folder and renames the programs into the cache. */
export async function goInstallIntoCache(build: GoBuild, log: Log): Promise<void> {
  const command = `go install ${build.packages.join(' ')}`;
  const go = await onPath('go');
  if (!go) {
    throw new Error(
      [
        `llmgw needs ${build.what} and found none.`,
        `Either install Go (1.22 or newer; e.g. \`apt-get install golang\`) so that llmgw can build it with`,
        `  ${command}`,
        build.otherwise,
      ].join('\n'),
    );
  }
  log(`llmgw: building ${build.what} with \`${command}\` into ${build.cacheDir}`);
  log('llmgw: this takes a few minutes the first time; later runs and other clones reuse the cached programs.');
  const started = Date.now();
  mkdirSync(build.cacheDir, { recursive: true });
  // Build into a private folder and rename, so that two clones building at once never
  // see a half-written binary.
  const buildDir = mkdtempSync(join(build.cacheDir, 'build-'));
  try {
    const args = ['install', ...(build.ldflags ? ['-ldflags', build.ldflags] : []), ...build.packages];
    // CGO_ENABLED=0 for every llmgw build: one setting means one build cache entry per
    // package, so the server build reuses what the CLI build compiled (and vice versa).
    await execFileAsync(go, args, {
      env: { ...process.env, GOBIN: buildDir, CGO_ENABLED: '0' },
      timeout: 30 * 60_000,
      maxBuffer: 64 * 1024 * 1024,
    });
    for (const [built, cached] of Object.entries(build.binaries)) renameSync(join(buildDir, built), join(build.cacheDir, cached));
  } catch (error) {
    const detail = error instanceof Error ? error.message : String(error);
    throw new Error(`building ${build.what} failed: ${detail}\nRun \`${command}\` by hand to see why. ${build.otherwise}`, {
      cause: error,
    });
  } finally {
    rmSync(buildDir, { recursive: true, force: true });
  }
  log(`llmgw: built ${build.what} into ${build.cacheDir} in ${Math.round((Date.now() - started) / 1000)} s`);
}
