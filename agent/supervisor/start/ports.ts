// Where an engine's ports are chosen, claims included. Agent side. A start gets the engine's
// HTTP port; rank 0 of a multi-node replica the rendezvous port(s) the other ranks join; and a
// Ray shard a block of ports for everything its Ray processes listen on (engines/ray-ports.ts).
// Several agents (simulated ones, tests, `llmgw up`, other programs) can share a host, so a
// port is taken only when no engine of ours or of another agent on this host carries it (its
// LLMGW_HTTP_PORT marker), it binds now, and its claim file is ours.
//
// Claims: between choosing a port and the engine carrying it in its marker (or binding it), two
// agents could choose the same free port; a claim file created with O_EXCL closes that window.
// Claims go stale after a minute, by which time the marker or the bound socket protects the
// port. They live in a directory of the agent's own (default `<state dir>/port-claims`; agents
// that share a host share one with --port-claims-dir), never in a world-writable one: in /tmp
// any local user could claim every port of the range (no engine could start) or plant the
// directory as a link to somewhere root then writes.
import { closeSync, lstatSync, mkdirSync, openSync, statSync, unlinkSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { ApplicationFailure } from '@temporalio/common';
import { FailureType } from '../../../common/failures.js';
import { isPortFree } from '../../../common/ports.js';
import { Engine, Launcher, type StartShard } from '../../../proto/gen/llmgw/v1/shard_pb.js';
import { DEFAULT_RAY_PORT_BLOCK, SGLANG_RENDEZVOUS_SPAN } from '../../engines/ray-ports.js';
import type { SupervisorCore } from '../core.js';
import { portsMarkedOnHost, rayPortsMarkedOnHost } from '../processes/markers.js';
import type { Shard } from '../shard.js';

export interface PortRange {
  from: number;
  to: number;
}

const PORT_LOCK = ' ports';
const CLAIM_TTL_MS = 60_000;

export function validatePortRange(range: PortRange): void {
  const ok = Number.isInteger(range.from) && Number.isInteger(range.to) && range.from >= 1 && range.to <= 65535 && range.from <= range.to;
  if (!ok) throw new Error(`invalid engine port range ${range.from}-${range.to}`);
}

/** The port the agent gives the engine: the request's, or the first free one in its range. */
export async function choosePort(core: SupervisorCore, spec: StartShard, existing: Shard | undefined): Promise<number> {
  if (spec.httpPort !== 0) return spec.httpPort;
  // Only rank 0 serves HTTP; worker ranks get no port.
  if (spec.rank !== 0) return 0;
  return core.locks.run(PORT_LOCK, async () => {
    const inUse = portsInUse(core, existing, []);
    const previous = existing?.record.httpPort ?? 0;
    inUse.delete(previous);
    const { from, to } = core.options.portRange;
    return takePort(core, inUse, previous, `${core.nodeId}/${spec.shardId}`, (held) => {
      const host = core.options.advertiseAddress;
      return `no free port for an engine in the agent's range ${from}-${to} on ${host} (${held} held by this agent's shards)`;
    });
  });
}

/**
 * Rank 0's rendezvous: a port of the agent's range (and, for SGLang, the ports just above it that
 * SGLang opens too: rendezvousSpan), kept across restarts when free.
 */
export async function chooseRendezvousPort(
  core: SupervisorCore,
  spec: StartShard,
  existing: Shard | undefined,
  httpPort: number,
): Promise<number> {
  return core.locks.run(PORT_LOCK, async () => {
    const inUse = portsInUse(core, existing, [httpPort]);
    const { from, to } = core.options.portRange;
    const size = rendezvousSpan(spec);
    const shape = { range: core.options.portRange, size, step: 1 };
    const owner = `${core.nodeId}/${spec.shardId}/rendezvous`;
    const span = await takeSpan(core, shape, inUse, existing?.spec.leaderPort ?? 0, owner, () => {
      return `shard ${spec.shardId}: no ${size} free port(s) in ${from}-${to} for the rendezvous of its ${spec.nnodes} ranks`;
    });
    return span.from;
  });
}

/**
 * How many ports from rank 0's leader port up its rendezvous holds: SGLang listens on a span
 * above its --dist-init-addr port (engines/ray-ports.ts), Ray's head and the fake leader on one.
 */
export function rendezvousSpan(spec: StartShard): number {
  return spec.profile?.engine === Engine.SGLANG ? SGLANG_RENDEZVOUS_SPAN : 1;
}

/** The ports rank 0's rendezvous holds, or undefined for a shard with none. */
export function rendezvousPorts(spec: StartShard): PortRange | undefined {
  if (spec.rank !== 0 || spec.nnodes <= 1 || spec.leaderPort <= 0) return undefined;
  return { from: spec.leaderPort, to: spec.leaderPort + rendezvousSpan(spec) - 1 };
}

/**
 * A block of the agent's Ray range (--ray-worker-ports) for every port this shard's Ray processes
 * listen on, kept across restarts when free. Blocks are aligned to the range, so two shards'
 * blocks never overlap, and no block of another shard, another agent's claim, or a bound port is
 * taken. Undefined when the agent has no Ray range (its Ray then picks ports itself).
 */
export async function chooseRayPorts(core: SupervisorCore, spec: StartShard, existing: Shard | undefined): Promise<PortRange | undefined> {
  const range = core.options.engineContext.rayWorkerPorts;
  if (!range) return undefined;
  const size = Math.min(core.options.rayPortsPerShard ?? DEFAULT_RAY_PORT_BLOCK, range.to - range.from + 1);
  return core.locks.run(PORT_LOCK, async () => {
    const inUse = new Set<number>(core.reservedPorts);
    for (const s of core.shards.values()) if (s !== existing && s.record.rayPorts) addSpan(inUse, s.record.rayPorts);
    // Other agents' Ray processes on this host, whose raylets may not have bound their block yet.
    for (const span of rayPortsMarkedOnHost(core.launcher)) if (span.from !== existing?.record.rayPorts?.from) addSpan(inUse, span);
    const owner = `${core.nodeId}/${spec.shardId}/ray`;
    return takeSpan(core, { range, size, step: size }, inUse, existing?.record.rayPorts?.from ?? 0, owner, (held) => {
      return `shard ${spec.shardId}: no free block of ${size} Ray ports in ${range.from}-${range.to} (${held} held by this agent's shards)`;
    });
  });
}

/**
 * A Ray shard's own block of ports (every port its Ray processes listen on, guarded by the
 * firewall like the rendezvous), and whether a head pins the Ray Client's port in it too.
 */
export async function rayContext(
  core: SupervisorCore,
  spec: StartShard,
  existing: Shard | undefined,
): Promise<{ rayPorts?: { from: number; to: number }; rayClient?: boolean }> {
  if (spec.profile?.launcher !== Launcher.RAY || spec.nnodes <= 1) return {};
  const rayPorts = await chooseRayPorts(core, spec, existing);
  if (!rayPorts) return {};
  const rayClient = spec.rank === 0 && (await core.options.rayHasClient?.()) === true;
  return { rayPorts, rayClient };
}

/** Gives back what a start reserved, once its record holds it (or the start failed). */
export function releaseSpan(core: SupervisorCore, span: PortRange | undefined): void {
  if (span) for (let port = span.from; port <= span.to; port++) core.reservedPorts.delete(port);
}

function addSpan(ports: Set<number>, span: PortRange): void {
  for (let port = span.from; port <= span.to; port++) ports.add(port);
}

/** Ports promised to starts in flight, carried by our other shards, or marked by other agents' engines. */
function portsInUse(core: SupervisorCore, existing: Shard | undefined, extra: number[]): Set<number> {
  const inUse = new Set<number>([...core.reservedPorts, ...extra]);
  for (const s of core.shards.values()) {
    if (s === existing) continue;
    if (s.record.httpPort > 0) inUse.add(s.record.httpPort);
    // A rendezvous (SGLang's whole span) is held even while nothing binds part of it yet.
    const rendezvous = rendezvousPorts(s.spec);
    if (rendezvous) addSpan(inUse, rendezvous);
  }
  // Engines of other agents on this host that were given a port but may not bind it yet.
  for (const p of portsMarkedOnHost(core.launcher)) inUse.add(p);
  return inUse;
}

async function takePort(
  core: SupervisorCore,
  inUse: Set<number>,
  previous: number,
  owner: string,
  noneFree: (held: number) => string,
): Promise<number> {
  const span = await takeSpan(core, { range: core.options.portRange, size: 1, step: 1 }, inUse, previous, owner, noneFree);
  return span.from;
}

/**
 * `size` ports from `previous` when they all still bind (a restart keeps its ports: clients and
 * logs stay easy to follow, and the ports are ours already), else the first run of `size` ports
 * (one starting every `step` ports of the range) that all bind and whose claim we win. Reserves
 * them for the start. Throws a non-retryable NoFreePort failure with `noneFree(held)` once none is.
 */
async function takeSpan(
  core: SupervisorCore,
  shape: { range: PortRange; size: number; step: number },
  inUse: Set<number>,
  previous: number,
  owner: string,
  noneFree: (held: number) => string,
): Promise<PortRange> {
  const { range, size, step } = shape;
  const held = inUse.size;
  const free = async (from: number): Promise<boolean> => {
    if (from < range.from || from + size - 1 > range.to) return false;
    for (let port = from; port < from + size; port++) if (inUse.has(port)) return false;
    for (let port = from; port < from + size; port++) if (!(await bindsNow(core, port))) return false;
    return true;
  };
  const reserve = (from: number): PortRange => {
    const span = { from, to: from + size - 1 };
    addSpan(core.reservedPorts, span);
    return span;
  };
  if (previous > 0 && (await free(previous))) return reserve(previous);
  // A span whose claim another agent on this host has just won is skipped like a bound one.
  for (let from = range.from; from + size - 1 <= range.to; from += step) {
    if (from === previous || !(await free(from))) continue;
    if (claim(core, from, owner)) return reserve(from);
  }
  throw ApplicationFailure.nonRetryable(noneFree(held), FailureType.NoFreePort);
}

async function bindsNow(core: SupervisorCore, port: number): Promise<boolean> {
  const host = core.options.advertiseAddress;
  if (await isPortFree(port, host)) return true;
  core.log(`port ${port} on ${host} is in the agent's engine range but another program holds it; skipping it`);
  return false;
}

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
