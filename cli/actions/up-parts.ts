// The processes of `llmgw up`'s stack (worker, agents, router): each started detached with its
// own log, and a part that exits while the stack starts fails the start at once, saying why.
// Also the waits of the start, which give up as soon as a part has failed. CLI side.
import { spawn } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';
import { join } from 'node:path';
import { tailLines } from '../../agent/supervisor/logs/logs.js';
import { readableLogLine } from '../../common/logger.js';
import type { Stack } from './up-teardown.js';

export class StackParts {
  /** Set once the stack is stopping: a part's exit is then expected. */
  stopping = false;
  /** Why the start cannot go on: the first part that exited while it ran. */
  failure: string | undefined;

  constructor(
    private readonly stack: Stack,
    private readonly logDir: string,
    /** Every part's environment: Temporal's address and the catalog key files (up-plan.ts catalogKeyEnv). */
    readonly env: Record<string, string>,
  ) {}

  /** `llmgw ARGS` as the part NAME, logging to <logDir>/NAME.log. */
  spawn(name: string, args: string[]): void {
    const log = join(this.logDir, `${name}.log`);
    const fd = openSync(log, 'a');
    const child = spawn(process.execPath, [join(__dirname, '../../../bin/llmgw.js'), ...args], {
      stdio: ['ignore', fd, fd],
      env: { ...process.env, ...this.env },
      detached: true,
    });
    closeSync(fd);
    child.once('exit', (code) => {
      if (this.stopping) return;
      this.stack.say(`${name} exited (code ${code}); see ${log}`);
      // During the start nothing waits for it in vain: the start fails now, saying why.
      this.failure ??= `${name} exited (code ${code}) while the stack was starting: ${lastLine(log)} (see ${log})`;
    });
    this.stack.children.push({ name, child });
  }

  /** Until `probe` answers, or a part of the stack has failed, or the timeout. */
  async waitFor<T>(what: string, probe: () => Promise<T | undefined | false>, timeoutMs = 120_000): Promise<T> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      if (this.failure !== undefined) throw new Error(this.failure);
      const value = await probe().catch(() => undefined);
      if (value) return value;
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}; logs are in .llmgw/logs`);
      await new Promise((r) => setTimeout(r, 300));
    }
  }
}

/** True once a request for `model` through the router at `port` is answered 200 (one token asked). */
export async function routerServes(port: number, model: string): Promise<boolean> {
  const res = await fetch(`http://127.0.0.1:${port}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model, prompt: 'ping', max_tokens: 1 }),
    signal: AbortSignal.timeout(5_000),
  });
  await res.body?.cancel();
  return res.ok;
}

/** The last line a part wrote to its log, usually why it stopped; a JSON record as its message. */
function lastLine(file: string): string {
  const line = tailLines(file, 1)[0];
  return line === undefined ? 'its log is empty or cannot be read' : readableLogLine(line).slice(0, 400);
}
