// Host-wide port claims for agents that share one machine (simulated hosts, tests).
// Between choosing a port and the engine carrying it in its LLMGW_HTTP_PORT marker
// (or binding it), two agents could choose the same free port; a claim file created
// with O_EXCL closes that window. Claims go stale after a minute, by which time the
// engine's marker or its bound socket protects the port.
import { closeSync, mkdirSync, openSync, statSync, unlinkSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const CLAIMS_DIR = join(tmpdir(), 'llmgw-port-claims');
const CLAIM_TTL_MS = 60_000;

/** True when this caller now holds the claim on `port` (or the previous claim was stale). */
export function claimPort(port: number, owner: string): boolean {
  mkdirSync(CLAIMS_DIR, { recursive: true });
  const file = join(CLAIMS_DIR, String(port));
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      const fd = openSync(file, 'wx');
      writeSync(fd, `${owner} ${process.pid} ${new Date().toISOString()}\n`);
      closeSync(fd);
      return true;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') return true; // cannot claim: fall back to the bind check alone
      try {
        if (Date.now() - statSync(file).mtimeMs < CLAIM_TTL_MS) return false;
        unlinkSync(file);
      } catch {
        // Someone else removed or renewed it; try once more.
      }
    }
  }
  return false;
}
