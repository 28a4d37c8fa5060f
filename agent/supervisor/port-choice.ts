// Which ports a start gets: the engine's HTTP port and, for rank 0 of a multi-node replica,
// the rendezvous port the other ranks join. Agent side. Several agents can share a host, so
// a port is taken only when it binds now, no other agent's engine carries it, and its
// claim file (port-claims.ts) is ours.
import { ApplicationFailure } from '@temporalio/common';
import { FailureType } from '../../common/failures.js';
import type { StartShard } from '../../proto/gen/llmgw/v1/shard_pb.js';
import type { SupervisorCore } from './core.js';
import { portsMarkedOnHost } from './markers.js';
import { claimPort, defaultClaimsDir, ensureClaimsDir } from './port-claims.js';
import { allocatePort } from './ports.js';
import type { Shard } from './shard.js';

const PORT_LOCK = ' ports';

/** Claims `port` in the agent's claims directory; an unsafe directory refuses the start. */
function claim(core: SupervisorCore, port: number, owner: string): boolean {
  const dir = core.options.portClaimsDir ?? defaultClaimsDir(core.options.stateDir);
  try {
    ensureClaimsDir(dir);
  } catch (error) {
    throw ApplicationFailure.nonRetryable(
      `${error instanceof Error ? error.message : String(error)}: fix it, or give the agent another --port-claims-dir`,
      FailureType.StateDirUnwritable,
    );
  }
  return claimPort(dir, port, owner);
}

/** The port the agent gives the engine: the request's, or the first free one in its range. */
export async function choosePort(core: SupervisorCore, spec: StartShard, existing: Shard | undefined): Promise<number> {
  if (spec.httpPort !== 0) return spec.httpPort;
  // Only rank 0 serves HTTP; worker ranks get no port.
  if (spec.rank !== 0) return 0;
  const { portRange, advertiseAddress } = core.options;
  const log = (line: string): void => core.log(line);
  return core.locks.run(PORT_LOCK, async () => {
    const inUse = new Set<number>(core.reservedPorts);
    for (const s of core.shards.values()) if (s !== existing && s.record.httpPort > 0) inUse.add(s.record.httpPort);
    // Engines of other agents on this host that were given a port but may not bind it yet.
    for (const p of portsMarkedOnHost(core.launcher)) inUse.add(p);
    // A restart keeps its port when it can: clients and logs stay easy to follow.
    const previous = existing?.record.httpPort ?? 0;
    if (previous > 0) inUse.delete(previous);
    const range = previous > 0 ? { from: previous, to: previous } : portRange;
    const owner = `${core.nodeId}/${spec.shardId}`;
    let port: number;
    try {
      port = await allocatePort(range, inUse, advertiseAddress, log);
      if (previous <= 0 && !claim(core, port, owner)) throw new Error('claimed by another agent');
    } catch {
      if (previous > 0) inUse.add(previous);
      // Skip ports another agent on this host has just claimed (bounded by the range size).
      for (let tries = portRange.to - portRange.from + 1; ; tries--) {
        port = await allocatePort(portRange, inUse, advertiseAddress, log);
        if (claim(core, port, owner) || tries <= 0) break;
        inUse.add(port);
      }
    }
    core.reservedPorts.add(port);
    return port;
  });
}

/** A second port of the agent's range for rank 0's rendezvous, kept across restarts when free. */
export async function chooseRendezvousPort(
  core: SupervisorCore,
  spec: StartShard,
  existing: Shard | undefined,
  httpPort: number,
): Promise<number> {
  const { portRange, advertiseAddress } = core.options;
  const log = (line: string): void => core.log(line);
  return core.locks.run(PORT_LOCK, async () => {
    const inUse = new Set<number>([...core.reservedPorts, httpPort, ...portsMarkedOnHost(core.launcher)]);
    for (const s of core.shards.values()) {
      if (s === existing) continue;
      if (s.record.httpPort > 0) inUse.add(s.record.httpPort);
      if (s.spec.leaderPort > 0 && s.spec.rank === 0) inUse.add(s.spec.leaderPort);
    }
    const previous = existing?.spec.leaderPort ?? 0;
    const owner = `${core.nodeId}/${spec.shardId}/rendezvous`;
    for (let tries = portRange.to - portRange.from + 1; tries > 0; tries--) {
      const range = previous > 0 && !inUse.has(previous) ? { from: previous, to: previous } : portRange;
      let port: number;
      try {
        port = await allocatePort(range, inUse, advertiseAddress, log);
      } catch {
        inUse.add(previous);
        continue;
      }
      if (port === previous || claim(core, port, owner)) {
        core.reservedPorts.add(port);
        return port;
      }
      inUse.add(port);
    }
    throw ApplicationFailure.nonRetryable(
      `shard ${spec.shardId}: no free port in ${portRange.from}-${portRange.to} for the rendezvous of its ${spec.nnodes} ranks`,
      FailureType.NoFreePort,
    );
  });
}
