// Port claims for agents that share one machine (simulated hosts, tests, `llmgw up`). Agent
// side. Between choosing a port and the engine carrying it in its LLMGW_HTTP_PORT marker (or
// binding it), two agents could choose the same free port; a claim file created with O_EXCL
// closes that window. Claims go stale after a minute, by which time the engine's marker or its
// bound socket protects the port.
//
// The claims live in a directory of the agent's own (default `<state dir>/port-claims`; agents
// that share a host share one with --port-claims-dir), never in a world-writable one: in
// /tmp any local user could claim every port of the range (no engine could start) or plant
// the directory as a link to somewhere root then writes.
import { closeSync, lstatSync, mkdirSync, openSync, statSync, unlinkSync, writeSync } from 'node:fs';
import { join } from 'node:path';

const CLAIM_TTL_MS = 60_000;

/**
 * Creates the claims directory (0700) and checks that it is a real directory of this user
 * that nobody else can write; throws saying why otherwise.
 */
export function ensureClaimsDir(dir: string): void {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const stat = lstatSync(dir);
  const uid = process.getuid?.();
  if (!stat.isDirectory()) throw new Error(`port claims directory ${dir} is not a directory (a link?)`);
  if (uid !== undefined && stat.uid !== uid)
    throw new Error(`port claims directory ${dir} belongs to uid ${stat.uid}, not to this agent (${uid})`);
  if (stat.mode & 0o022) throw new Error(`port claims directory ${dir} is writable by others (mode ${(stat.mode & 0o777).toString(8)})`);
}

/** True when this caller now holds the claim on `port` in `dir` (or the previous claim was stale). */
export function claimPort(dir: string, port: number, owner: string): boolean {
  const file = join(dir, String(port));
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      const fd = openSync(file, 'wx', 0o600);
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

/** Where an agent keeps its claims unless told to share a directory with other agents. */
export function defaultClaimsDir(stateDir: string): string {
  return join(stateDir, 'port-claims');
}
