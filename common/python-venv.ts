// Python programs llmgw and its tests rely on (huggingface_hub, moto's S3 server, Ray, a model
// package), each in its own venv under ~/.cache/llmgw, installed once per machine with pip.
// A venv is complete only once its marker is written, so an install cut short is redone.
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { llmgwCacheDir, type Log } from '../temporal/go-install.js';
import { withCacheLock } from './cache-lock.js';

const execFileAsync = promisify(execFile);

export interface PythonVenv {
  /** A short name for messages and the folder: "ray". */
  name: string;
  /** pip requirements, every one pinned to a version: ["ray==2.60.0"]. */
  packages: string[];
}

const MARKER = '.llmgw-complete';

/** ~/.cache/llmgw/venv-<name>-<digest of its packages>: a new pin is a new folder, never a changed one. */
export function venvDir(venv: PythonVenv): string {
  const digest = createHash('sha256').update(venv.packages.join('\n')).digest('hex').slice(0, 10);
  return llmgwCacheDir(`venv-${venv.name}-${digest}`);
}

export function venvReady(venv: PythonVenv): boolean {
  const marker = join(venvDir(venv), MARKER);
  return existsSync(marker) && readFileSync(marker, 'utf8') === venv.packages.join('\n');
}

/** The command to run by hand, for messages: what ensureVenv does. */
export function venvInstallCommand(venv: PythonVenv): string {
  const dir = venvDir(venv);
  return `python3 -m venv ${dir} && ${dir}/bin/pip install ${venv.packages.map((p) => `'${p}'`).join(' ')}`;
}

/**
 * Returns the venv's folder, creating it and installing its packages the first time. Two
 * processes that ask at once share one install (a lock in the cache); a venv left half made by
 * a killed install has no marker and is made again.
 */
export async function ensureVenv(venv: PythonVenv, log: Log): Promise<string> {
  const dir = venvDir(venv);
  if (venvReady(venv)) return dir;
  return withCacheLock(`${dir}.lock`, log, async () => {
    if (venvReady(venv)) return dir;
    const started = Date.now();
    log(`llmgw: installing ${venv.packages.join(' ')} into ${dir} (once per machine)`);
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(dir, { recursive: true });
    try {
      await execFileAsync(process.env.LLMGW_PYTHON ?? 'python3', ['-m', 'venv', dir], { timeout: 5 * 60_000 });
      await execFileAsync(join(dir, 'bin/pip'), ['install', '--quiet', '--disable-pip-version-check', '--no-input', ...venv.packages], {
        timeout: 30 * 60_000,
        maxBuffer: 64 * 1024 * 1024,
      });
    } catch (error) {
      const detail = error instanceof Error ? error.message : String(error);
      throw new Error(
        `installing ${venv.packages.join(' ')} failed: ${detail.slice(-2000)}\nRun \`${venvInstallCommand(venv)}\` by hand to see why.`,
        {
          cause: error,
        },
      );
    }
    writeFileSync(join(dir, MARKER), venv.packages.join('\n'));
    log(`llmgw: installed ${venv.packages.join(' ')} in ${Math.round((Date.now() - started) / 1000)} s`);
    return dir;
  });
}
