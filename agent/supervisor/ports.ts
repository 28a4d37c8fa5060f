// Chooses the HTTP port for an engine from the agent's own range. Agent side: several agents
// (simulated ones, or other programs) can share a host, so a port is handed out only after a
// real bind shows that nobody holds it.
import { ApplicationFailure } from '@temporalio/common';
import { FailureType } from '../../common/failures.js';
import { isPortFree } from '../../common/ports.js';

export interface PortRange {
  from: number;
  to: number;
}

/**
 * The first port in `range` (inclusive) that none of this agent's shards holds (`inUse`) and
 * that binds on `host` now. A port some other program holds is skipped and logged.
 * Throws a non-retryable NoFreePort failure naming the range when there is none.
 */
export async function allocatePort(
  range: PortRange,
  inUse: ReadonlySet<number>,
  host: string,
  log: (line: string) => void = () => {},
): Promise<number> {
  for (let port = range.from; port <= range.to; port++) {
    if (inUse.has(port)) continue;
    if (await isPortFree(port, host)) return port;
    log(`port ${port} on ${host} is in the agent's engine range but another program holds it; skipping it`);
  }
  throw ApplicationFailure.nonRetryable(
    `no free port for an engine in the agent's range ${range.from}-${range.to} on ${host} (${inUse.size} held by this agent's shards)`,
    FailureType.NoFreePort,
  );
}

export function validatePortRange(range: PortRange): void {
  const ok = Number.isInteger(range.from) && Number.isInteger(range.to) && range.from >= 1 && range.to <= 65535 && range.from <= range.to;
  if (!ok) throw new Error(`invalid engine port range ${range.from}-${range.to}`);
}
