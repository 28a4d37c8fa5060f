// `llmgw up` as a test starts it: its own dev server and ports moved by an offset that is free
// now, node ids under a prefix of its own, so that several can run beside the rest of the suite.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isPortFree } from '../../common/ports.js';
import { spawnLlmgw, type LlmgwProcess } from './processes.js';

export const UP_CATALOG = join(__dirname, '../../examples/catalog.yaml');

/** An offset that moves every port `llmgw up` opens onto ones that are free now. */
export async function freeOffset(): Promise<number> {
  const bases = [7233, 8233, 8080, 8081, 7401, 7402, 9464, 9465, 9466, 18000, 18500];
  for (let attempt = 0; attempt < 40; attempt++) {
    const offset = 20_000 + Math.floor(Math.random() * 200) * 100;
    let free = true;
    for (const base of bases) free &&= await isPortFree(base + offset, '127.0.0.1');
    if (free) return offset;
  }
  throw new Error('no free port offset for llmgw up');
}

export interface UpRun {
  proc: LlmgwProcess;
  /** The simulated agents' node ids. */
  nodeIds: string[];
  offset: number;
}

/** Starts `llmgw up` with its own dev server (not the harness's) in a fresh working directory. */
export async function spawnUp(
  prefix: string,
  args: string[] = [],
  offset?: number,
  /** `cwd`: the working directory of an earlier start (its dev server's data is there). */
  options: { cwd?: string; env?: Record<string, string> } = {},
): Promise<UpRun & { cwd: string }> {
  const chosen = offset ?? (await freeOffset());
  const cwd = options.cwd ?? mkdtempSync(join(tmpdir(), 'llmgw-up-'));
  const proc = spawnLlmgw(
    ['up', '--catalog', UP_CATALOG, '--port-offset', String(chosen), '--node-prefix', prefix, ...args],
    { TEMPORAL_ADDRESS: '', ...options.env },
    { cwd },
  );
  return { proc, nodeIds: [`${prefix}-a`, `${prefix}-b`], offset: chosen, cwd };
}
