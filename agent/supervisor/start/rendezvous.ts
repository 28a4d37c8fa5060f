// Which rendezvous ports this host must guard, and keeping the agent's firewall in step with the
// shards it runs. Agent side. Rank 0 of a multi-node replica listens on its leader port (Ray's
// head, SGLang's --dist-init-addr and the span above it) for the other ranks, and every rank of a
// Ray replica runs a raylet, an object manager, agents and workers on its own block of ports;
// anyone else who reaches them could join the cluster or hand it work, and run code as the engine
// user, so only the peers its placement ticket names may.
import { isIP } from 'node:net';
import { readPlacementTicket } from '../../../common/placement-ticket.js';
import type { StartShard } from '../../../proto/gen/llmgw/v1/shard_pb.js';
import type { PortSpan } from '../../engines/ray-ports.js';
import { errorText, type SupervisorCore } from '../core.js';
import type { Shard } from '../shard.js';
import { rendezvousPorts } from './ports.js';

export interface RendezvousOpening {
  replicaId: string;
  shardId: string;
  /** Every port of the shard that only its peers may reach: the rendezvous, its Ray block. */
  ports: PortSpan[];
  /** The registered addresses of every rank of the placement (IP literals). */
  peers: string[];
}

/** The ports a shard listens on for its peers alone; empty for a single-node shard. */
function guardedPorts(spec: StartShard, rayPorts: PortSpan | undefined): PortSpan[] {
  if (spec.nnodes <= 1) return [];
  const rendezvous = rendezvousPorts(spec);
  return [...(rendezvous ? [rendezvous] : []), ...(rayPorts ? [rayPorts] : [])];
}

function portsOf(shard: Shard): PortSpan[] {
  return guardedPorts(shard.spec, shard.record.rayPorts);
}

/**
 * The peers from the shard's placement ticket, which the agent verified before it started (or,
 * for an adopted shard, before the previous agent did: the spec is in the agent's own state
 * dir). Undefined when there is none to read (an agent without a key file), or an address is
 * not an IP literal (nft would resolve a name once, at load).
 */
function peersOf(spec: StartShard): string[] | undefined {
  const peers = readPlacementTicket(spec.placementTicket)?.peers;
  if (!Array.isArray(peers) || peers.length < spec.nnodes) return undefined;
  return peers.every((p) => typeof p === 'string' && isIP(p) !== 0) ? peers : undefined;
}

/** What the firewall must hold now: one opening per live shard with ports for its peers. */
export function rendezvousOpenings(core: SupervisorCore): RendezvousOpening[] {
  const openings: RendezvousOpening[] = [];
  for (const shard of core.shards.values()) {
    const { spec } = shard;
    const ports = portsOf(shard);
    if (shard.exited || ports.length === 0) continue;
    const peers = peersOf(spec);
    if (peers) openings.push({ replicaId: spec.replicaId, shardId: spec.shardId, ports, peers });
  }
  return openings;
}

/** `30007`, `10258-10513`: for logs. */
export function spanText(spans: PortSpan[]): string {
  return spans.map((s) => (s.from === s.to ? String(s.from) : `${s.from}-${s.to}`)).join(', ');
}

/**
 * Before a shard of a multi-node replica spawns anything: its rendezvous and Ray ports are open
 * to its peers only (rejects when nft fails: the start fails rather than listen to everyone), or
 * a warning says why they cannot be. Shards with no such port need nothing here.
 */
export async function guardRendezvous(core: SupervisorCore, shard: Shard): Promise<void> {
  const { spec } = shard;
  const ports = portsOf(shard);
  if (ports.length === 0 || !core.options.rendezvousFirewall) return;
  if (peersOf(spec) === undefined) {
    core.log(
      `shard ${spec.shardId}: its placement ticket names no peer addresses (no ticket, or a name rather than an IP): its rendezvous port(s) ${spanText(ports)} are open to anyone who reaches ${core.options.advertiseAddress}`,
      'warn',
    );
  }
  await syncRendezvous(core);
}

const pending = new WeakMap<SupervisorCore, Promise<void>>();

/**
 * Brings the firewall in step with the shards now, after any sync already under way (so two
 * never interleave, and each reads the shards when it runs). Rejects when nft fails.
 */
export function syncRendezvous(core: SupervisorCore): Promise<void> {
  const firewall = core.options.rendezvousFirewall;
  if (!firewall) return Promise.resolve();
  const next = (pending.get(core) ?? Promise.resolve()).then(() => firewall.apply(rendezvousOpenings(core)));
  pending.set(
    core,
    next.catch(() => undefined),
  );
  return next;
}

/** Follows every shard change (an exit, a stop, a restart): a closed port needs no rule. */
export function followShardChanges(core: SupervisorCore): void {
  if (!core.options.rendezvousFirewall) return;
  core.changes.on('change', () => {
    syncRendezvous(core).catch((err: unknown) => core.log(`rendezvous firewall: ${errorText(err)}`, 'error'));
  });
}
