// Which rendezvous ports this host must guard, and keeping the agent's firewall in step with the
// shards it runs. Agent side. Rank 0 of a multi-node replica listens on its leader port (Ray's
// head, SGLang's --dist-init-addr) for the other ranks; anyone else who reaches it could join the
// cluster and run code as the engine user, so only the peers its placement ticket names may.
import { isIP } from 'node:net';
import { readPlacementTicket } from '../../../common/placement-ticket.js';
import type { StartShard } from '../../../proto/gen/llmgw/v1/shard_pb.js';
import { errorText, type SupervisorCore } from '../core.js';

export interface RendezvousOpening {
  replicaId: string;
  shardId: string;
  port: number;
  /** The registered addresses of every rank of the placement (IP literals). */
  peers: string[];
}

/** Leader ports of rank 0 of a multi-node replica: the rendezvous the other ranks join. */
function hasRendezvous(spec: StartShard): boolean {
  return spec.rank === 0 && spec.nnodes > 1 && spec.leaderPort > 0;
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

/** What the firewall must hold now: one opening per live rank-0 shard with a rendezvous. */
export function rendezvousOpenings(core: SupervisorCore): RendezvousOpening[] {
  const openings: RendezvousOpening[] = [];
  for (const shard of core.shards.values()) {
    const { spec } = shard;
    if (shard.exited || !hasRendezvous(spec)) continue;
    const peers = peersOf(spec);
    if (peers) openings.push({ replicaId: spec.replicaId, shardId: spec.shardId, port: spec.leaderPort, peers });
  }
  return openings;
}

/**
 * Before rank 0 of a multi-node replica spawns anything: its rendezvous port is open to its
 * peers only (rejects when nft fails: the start fails rather than listen to everyone), or a
 * warning says why it cannot be. Other shards need nothing here.
 */
export async function guardRendezvous(core: SupervisorCore, spec: StartShard): Promise<void> {
  if (!hasRendezvous(spec) || !core.options.rendezvousFirewall) return;
  if (peersOf(spec) === undefined) {
    core.log(
      `shard ${spec.shardId}: its placement ticket names no peer addresses (no ticket, or a name rather than an IP): its rendezvous port ${spec.leaderPort} is open to anyone who reaches ${core.options.advertiseAddress}`,
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
