// Finds (or builds, once per machine) llama.cpp's `llama-server`, the real engine every machine
// can run. Order: LLMGW_LLAMA_SERVER, `llama-server` on PATH, the engine cache (~/.cache/llmgw,
// or /var/cache/llmgw for root), and finally a build of the pinned llama-cpp-python sdist's
// vendored llama.cpp with cmake.
import { execFile } from 'node:child_process';
import { copyFileSync, existsSync, mkdtempSync, readdirSync, renameSync, rmSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { withCacheLock } from '../../common/cache-lock.js';
import { engineCacheDir, makeEngineCacheDir } from '../../common/engine-cache.js';
import { onPath, type Log } from '../../temporal/go-install.js';

const execFileAsync = promisify(execFile);

/** The llama-cpp-python sdist whose vendor/llama.cpp is built: its source is on the package index. */
export const LLAMA_CPP_PYTHON_VERSION = '0.3.36';

export function llamaServerCacheDir(): string {
  return engineCacheDir(`llama-server-${LLAMA_CPP_PYTHON_VERSION}`);
}

const cachedBinary = (): string => join(llamaServerCacheDir(), 'llama-server');

async function runs(binary: string): Promise<boolean> {
  try {
    // llama-server prints its build on --version (to stderr) and exits 0.
    await execFileAsync(binary, ['--version'], { timeout: 15_000 });
    return true;
  } catch {
    return false;
  }
}

/** The llama-server the agent runs, or undefined when none is installed (nothing is built here). */
export async function findLlamaServer(): Promise<string | undefined> {
  const explicit = process.env.LLMGW_LLAMA_SERVER;
  if (explicit) {
    if (!(await runs(explicit)))
      throw new Error(
        `LLMGW_LLAMA_SERVER=${explicit} does not run (\`${explicit} --version\` failed). Point it at a llama-server binary, or unset it.`,
      );
    return explicit;
  }
  const fromPath = await onPath('llama-server');
  if (fromPath && (await runs(fromPath))) return fromPath;
  if (existsSync(cachedBinary()) && (await runs(cachedBinary()))) return cachedBinary();
  return undefined;
}

/** What to run by hand, for the message of an agent that has no llama-server. */
export const LLAMA_SERVER_MISSING =
  'no llama-server found: run `llmgw engines install llamacpp` (builds it once per machine into the engine cache, docs/engines.md), put llama-server on PATH, or set LLMGW_LLAMA_SERVER';

/** Returns a llama-server, building the pinned one into the cache if none is installed. */
export async function ensureLlamaServer(log: Log): Promise<string> {
  const found = await findLlamaServer();
  if (found) return found;
  return withCacheLock(`${llamaServerCacheDir()}.lock`, log, async () => {
    if (existsSync(cachedBinary()) && (await runs(cachedBinary()))) return cachedBinary();
    await buildLlamaServer(log);
    return cachedBinary();
  });
}

async function step(what: string, file: string, args: string[], options: { cwd?: string; timeoutMs: number }): Promise<void> {
  try {
    await execFileAsync(file, args, { cwd: options.cwd, timeout: options.timeoutMs, maxBuffer: 256 * 1024 * 1024 });
  } catch (error) {
    const killed = (error as { killed?: boolean }).killed ? ` (stopped after ${options.timeoutMs / 60_000} min)` : '';
    const detail = error instanceof Error ? error.message : String(error);
    throw new Error(
      `building llama-server failed while ${what}${killed}: ${detail.slice(-3000)}\n` +
        'It needs python3 with pip, cmake and a C++17 compiler (gcc 9 or newer). Or install llama-server yourself and set LLMGW_LLAMA_SERVER (docs/engines.md).',
      { cause: error },
    );
  }
}

async function buildLlamaServer(log: Log): Promise<void> {
  const started = Date.now();
  const cacheDir = llamaServerCacheDir();
  makeEngineCacheDir(cacheDir);
  const work = mkdtempSync(join(cacheDir, 'build-'));
  const cuda = await onPath('nvcc');
  const jobs = Math.max(1, availableParallelism());
  log(
    `llmgw: building llama-server (llama.cpp from llama-cpp-python ${LLAMA_CPP_PYTHON_VERSION}, ${cuda ? 'CUDA' : 'CPU'} backend, ${jobs} jobs) into ${cacheDir}`,
  );
  log('llmgw: this takes 5 to 15 minutes the first time; later runs and other clones reuse it.');
  try {
    await step(
      'downloading the source',
      process.env.LLMGW_PYTHON ?? 'python3',
      [
        '-m',
        'pip',
        'download',
        '--quiet',
        '--disable-pip-version-check',
        '--no-deps',
        // Only this package as its source: with ':all:' pip builds the build tools it needs to
        // read the sdist from source too (cmake among them), which took over 10 minutes here.
        '--no-binary',
        'llama-cpp-python',
        '-d',
        work,
        `llama-cpp-python==${LLAMA_CPP_PYTHON_VERSION}`,
      ],
      { timeoutMs: 10 * 60_000 },
    );
    const sdist = readdirSync(work).find((name) => name.endsWith('.tar.gz'));
    if (!sdist) throw new Error(`pip left no .tar.gz in ${work}`);
    await step('unpacking the source', 'tar', ['-xzf', sdist], { cwd: work, timeoutMs: 5 * 60_000 });
    const source = join(work, sdist.replace(/\.tar\.gz$/, ''), 'vendor/llama.cpp');
    // Static, so the binary can be moved into the cache without its shared libraries; no curl,
    // since llmgw hands the engine its weights and the engine downloads nothing.
    const configure = [
      '-B',
      'build',
      '-DCMAKE_BUILD_TYPE=Release',
      '-DBUILD_SHARED_LIBS=OFF',
      '-DLLAMA_CURL=OFF',
      '-DLLAMA_BUILD_TESTS=OFF',
      '-DLLAMA_BUILD_EXAMPLES=OFF',
      ...(cuda ? ['-DGGML_CUDA=ON'] : []),
    ];
    await step('configuring with cmake', 'cmake', configure, { cwd: source, timeoutMs: 10 * 60_000 });
    await step('compiling', 'nice', ['-n', '10', 'cmake', '--build', 'build', '--target', 'llama-server', '-j', String(jobs)], {
      cwd: source,
      timeoutMs: 90 * 60_000,
    });
    // Copy then rename, so another process never sees a half-written binary.
    copyFileSync(join(source, 'build/bin/llama-server'), join(work, 'llama-server'));
    renameSync(join(work, 'llama-server'), cachedBinary());
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
  log(`llmgw: built llama-server into ${cacheDir} in ${Math.round((Date.now() - started) / 1000)} s`);
}

/**
 * What an agent tells its llama.cpp launches: the binary it found at start (none is built by an
 * agent: a build takes minutes and belongs to `llmgw engines install`), and whether it has a
 * GPU backend, read from its own `--list-devices`.
 */
export async function llamaServerForAgent(log: Log): Promise<{ llamaServerCommand?: string[]; llamaServerGpu?: boolean }> {
  const binary = await findLlamaServer().catch((error: unknown) => {
    log(error instanceof Error ? error.message : String(error));
    return undefined;
  });
  if (!binary) {
    log(`llamacpp engines cannot start here: ${LLAMA_SERVER_MISSING}`);
    return {};
  }
  let devices = '';
  try {
    const { stdout, stderr } = await execFileAsync(binary, ['--list-devices'], { timeout: 15_000 });
    devices = `${stdout}\n${stderr}`;
  } catch {
    // An older build without --list-devices: assume the CPU backend, which never offloads.
  }
  const gpu = /\b(CUDA|ROCm|HIP|Vulkan|Metal|SYCL)\d*\b/.test(devices);
  log(`llamacpp engines run ${binary} (${gpu ? 'GPU backend: layers offloaded to the shard’s GPUs' : 'CPU backend'})`);
  return { llamaServerCommand: [binary], llamaServerGpu: gpu };
}
