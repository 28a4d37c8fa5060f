// A test router on loopback: its listener and admin listener on ports picked free, and a
// start that lost one of them to another test file between pick and bind tried again.
import { findFreePort } from '../../common/ports.js';
import { spawnLlmgw, type LlmgwProcess } from './processes.js';

export interface TestRouter {
  proc: LlmgwProcess;
  port: number;
  url: string;
  /** Its admin listener (/health, /metrics). */
  adminUrl: string;
}

/** `args`: flags after `--port`, `--host` and `--admin-addr` (e.g. `--debug-headers`). */
export async function spawnTestRouter(args: string[] = [], env: Record<string, string> = {}): Promise<TestRouter> {
  for (let attempt = 1; ; attempt++) {
    const port = await findFreePort();
    const admin = await findFreePort();
    const proc = spawnLlmgw(['router', '--port', String(port), '--host', '127.0.0.1', '--admin-addr', `127.0.0.1:${admin}`, ...args], env);
    try {
      await proc.waitForOutput(/listening/, 30_000);
      return { proc, port, url: `http://127.0.0.1:${port}`, adminUrl: `http://127.0.0.1:${admin}` };
    } catch (error) {
      await proc.stop(2_000);
      if (attempt >= 3 || !/EADDRINUSE/.test(proc.output())) throw error;
    }
  }
}
