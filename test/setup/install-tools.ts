// The test suite's own installer, run by the global setup before any test: every tool in
// test/setup/tools.ts, once per machine into ~/.cache/llmgw, each with a line saying what it
// installs and how long it took. What only root can install is installed as root and otherwise
// left to the tests that need it, which skip and say what to run.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { ensureGemmaModel } from '../../common/gemma-gguf.js';
import { ensureVenv } from '../../common/python-venv.js';
import { ensureLlamaServer } from '../../agent/engines/llamacpp-binary.js';
import { onPath, type Log } from '../../temporal/go-install.js';
import { ensureTemporalServer } from '../../temporal/postgres/server-binary.js';
import { ensureTemporalCli } from '../../temporal/cli-binary.js';
import { PYTHON_TOOLS, ROOT_PACKAGES } from './tools.js';

const execFileAsync = promisify(execFile);

async function timed<T>(what: string, log: Log, work: () => Promise<T>): Promise<T> {
  const started = Date.now();
  const result = await work();
  const seconds = (Date.now() - started) / 1000;
  if (seconds >= 1) log(`test tools: ${what} ready in ${seconds.toFixed(1)} s`);
  return result;
}

async function installRootPackages(log: Log): Promise<void> {
  const missing: string[] = [];
  for (const { pkg, command } of ROOT_PACKAGES) if (!(await onPath(command))) missing.push(pkg);
  if (missing.length === 0) return;
  if (process.getuid?.() !== 0) {
    log(
      `test tools: not root, so ${missing.join(' and ')} stay uninstalled; the tests that need them skip (sudo apt-get install ${missing.join(' ')})`,
    );
    return;
  }
  await timed(`apt-get install ${missing.join(' ')}`, log, async () => {
    log(`test tools: apt-get install ${missing.join(' ')} (as root, once per machine)`);
    const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
    await execFileAsync('apt-get', ['update', '-qq'], { env, timeout: 10 * 60_000 });
    await execFileAsync('apt-get', ['install', '-y', '-qq', ...missing], { env, timeout: 20 * 60_000, maxBuffer: 64 * 1024 * 1024 });
  });
}

/**
 * Installs what the tests need. The Python venvs download while the builds (the Temporal CLI
 * and server with Go, llama-server with cmake) share the CPUs; a failure names what to run by hand.
 */
export async function ensureTestTools(log: Log): Promise<void> {
  const started = Date.now();
  await Promise.all([
    ...Object.values(PYTHON_TOOLS).map((venv) => timed(venv.packages.join(' '), log, () => ensureVenv(venv, log))),
    timed('the Temporal CLI', log, () => ensureTemporalCli(log)),
    timed('the Temporal server for the PostgreSQL test', log, () => ensureTemporalServer(log)),
    timed('llama-server', log, () => ensureLlamaServer(log)),
    timed('Gemma 3 270M (GGUF)', log, () => ensureGemmaModel(log)),
    installRootPackages(log),
  ]);
  const seconds = (Date.now() - started) / 1000;
  log(`test tools: all ready in ${seconds.toFixed(1)} s`);
}
