// On-demand CPU profiles of any llmgw process, for finding where a benchmark's cores went.
// With LLMGW_CPU_PROFILE_DIR set, the process profiles itself from the start; each SIGUSR2
// writes what was sampled since the last one to DIR/<command>-<pid>-<n>.cpuprofile (open it in
// Chrome's DevTools or speedscope) and starts afresh. Off (and costless) when the variable is unset.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Session } from 'node:inspector/promises';

export function profileOnSignal(command: string): void {
  const dir = process.env.LLMGW_CPU_PROFILE_DIR;
  if (!dir) return;
  const session = new Session();
  session.connect();
  let count = 0;
  const start = async (): Promise<void> => {
    await session.post('Profiler.enable');
    await session.post('Profiler.start');
  };
  void start();
  process.on('SIGUSR2', () => {
    void (async () => {
      const { profile } = await session.post('Profiler.stop');
      writeFileSync(join(dir, `${command}-${process.pid}-${++count}.cpuprofile`), JSON.stringify(profile));
      await start();
    })();
  });
}
