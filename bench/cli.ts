// How a benchmark file reads its command line and runs its parts: number flags, forking its own
// file as a child with `--role NAME ARGS...`, and starting as the benchmark or as that child.
import { fork, type ChildProcess } from 'node:child_process';

/** A number flag: positive unless `min` says otherwise; the fallback when the flag is absent. */
export function numberFlag(name: string, fallback: number, min?: number): number {
  const at = process.argv.indexOf(name);
  const value = at > 0 ? Number(process.argv[at + 1]) : fallback;
  if (!Number.isFinite(value) || (min === undefined ? value <= 0 : value < min))
    throw new Error(`${name} takes ${min === undefined ? 'a positive number' : `a number of at least ${min}`}`);
  return value;
}

/**
 * Runs `main` and exits with its outcome, or, in a child forked with --role, runs `role` with the
 * role's name and arguments; a child exits when its parent goes or asks it to stop.
 */
export function runMainOrRole(bench: string, main: () => Promise<void>, role: (name: string, args: string[]) => void): void {
  const roleAt = process.argv.indexOf('--role');
  if (roleAt < 0) {
    main().then(
      () => process.exit(0),
      (err: unknown) => {
        console.error(`${bench} failed: ${(err as Error).stack ?? String(err)}`);
        process.exit(1);
      },
    );
    return;
  }
  process.on('disconnect', () => process.exit(0));
  process.on('SIGTERM', () => process.exit(0));
  const [name = '', ...args] = process.argv.slice(roleAt + 1);
  role(name, args);
}

/** Forks the benchmark's own `file` as a child with `--role ...args`; `ready` is the child's first message. */
export function forkRole<Ready>(file: string, args: string[]): { child: ChildProcess; ready: Promise<Ready> } {
  const child = fork(file, ['--role', ...args], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const ready = new Promise<Ready>((resolve, reject) => {
    child.once('message', (m: Ready) => resolve(m));
    child.once('exit', (code) => reject(new Error(`${args[0] ?? '?'} exited with ${code}`)));
  });
  return { child, ready };
}

/** A forked role's first message, which must say it is ready. */
export function readyOf<Ready>(m: { ready: Ready } | object): Ready {
  if (!('ready' in m)) throw new Error('a child spoke before it was ready');
  return m.ready;
}

/** Ends a forked role: it leaves when its IPC channel closes, or is killed after `graceMs`. */
export function stopChild(child: ChildProcess, graceMs = 2000): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null) return resolve();
    child.once('exit', () => resolve());
    if (child.connected) child.disconnect();
    setTimeout(() => child.exitCode === null && child.kill('SIGKILL'), graceMs).unref();
  });
}
