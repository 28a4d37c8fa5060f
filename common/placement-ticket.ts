// Placement tickets: the control worker's signature over where one shard runs — the replica's
// workflow and run chain, the node, shard and rank, the GPUs, the ports, the leader's registered
// address, the revision and when it was issued — made when placement reserved the GPUs
// (activities/placement.ts) and renewed before each start (activities/placement-tickets.ts),
// checked by the agent before it writes a spec or spawns anything (agent/placement-ticket.ts).
// Process side.
import type { StartShard } from '../proto/gen/llmgw/v1/shard_pb.js';
import type { CatalogKey, CatalogKeyring } from './catalog-key.js';
import { openStatement, readStatement, signedStatement, type OpenedStatement, type StatementForm } from './signed-statement.js';
import { endpointAttestationProblem, RENDEZVOUS_DOMAIN } from './endpoint-attestation.js';

export interface PlacementTicket {
  /** The replica workflow the shard belongs to: the only workflow whose startShard may carry it. */
  replicaId: string;
  /** The run that asked for it (for the record: a restart after continue-as-new is another run). */
  placedByRun: string;
  /**
   * The replica workflow's run chain (its first run's id): it survives continue-as-new, but a
   * workflow started again under a closed replica's id is another chain, so an old ticket
   * replayed by it is refused.
   */
  chain: string;
  /** When it was signed (ms since the epoch): a new engine starts only on a fresh ticket. */
  issuedAt: number;
  shardId: string;
  nodeId: string;
  rank: number;
  nnodes: number;
  gpus: number[];
  hcas: string[];
  /** 0: the agent chooses from its --port-range (placement never names a port). */
  httpPort: number;
  /** Rank 0's registered management address ('' for a single-node replica). */
  leaderAddress: string;
  leaderNode: string;
  /** The revision's signature: the ticket holds only for the revision it was placed for. */
  revision: string;
  /** This shard's node's registered management address: where its engine may be routed to. */
  address: string;
  deployment: string;
  /** The model name the revision serves (the agent checks it against the signed profile). */
  servedName: string;
  /**
   * Every rank's registered management address, in rank order ([] for a single-node replica):
   * the only hosts rank 0's agent lets reach its rendezvous port (agent/host/rendezvous-firewall.ts).
   */
  peers: string[];
  /**
   * The chain whose engine key the shard's engine holds (common/engine-keys.ts), when not
   * `chain`: a renewal for a replica rebuilt around running engines (a new chain) keeps the chain
   * that started them, since an engine's key cannot change while it runs. Signed only when set.
   */
  keyChain?: string;
  /**
   * A multi-node replica whose rank 0's agent is enrolled: that key (`ed25519-public:…`). A
   * worker rank then joins only the rendezvous port rank 0's agent signed for (its start's
   * leaderAttestation). Signed only when set, so an unenrolled leader's gang starts as before.
   */
  leaderKey?: string;
}

/** The signed fields, in one fixed order; keyChain and leaderKey after them, each only when set. */
const FORM: StatementForm<PlacementTicket> = {
  domain: 'llmgw placement v1',
  fields: [
    'replicaId',
    'placedByRun',
    'chain',
    'issuedAt',
    'shardId',
    'nodeId',
    'rank',
    'nnodes',
    'gpus',
    'hcas',
    'httpPort',
    'leaderAddress',
    'leaderNode',
    'revision',
    'address',
    'deployment',
    'servedName',
    'peers',
  ],
  optional: ['keyChain', 'leaderKey'],
};

/**
 * The optional fields are signed only when non-empty, as they always were: '' is not set, so a
 * ticket signed with `keyChain: ''` is the same bytes as one without.
 */
const withoutEmpty = (ticket: PlacementTicket): PlacementTicket => ({
  ...ticket,
  keyChain: ticket.keyChain || undefined,
  leaderKey: ticket.leaderKey || undefined,
});

/** `<base64url JSON>.<signature>`: readable by anyone, made only by the control worker. */
export function signPlacementTicket(ticket: PlacementTicket, keyring: CatalogKeyring): string {
  return signedStatement(FORM, withoutEmpty(ticket), keyring);
}

export type TicketVerdict = { ok: true; ticket: PlacementTicket; legacy: boolean } | { ok: false; why: string };

function verdictWhy(verdict: Exclude<OpenedStatement<PlacementTicket>, { ok: true }>): string {
  switch (verdict.why) {
    case 'unreadable':
      return 'its placement ticket is malformed';
    case 'bad-key':
      return verdict.message;
    case 'unsigned':
      return 'its placement ticket is unsigned';
    case 'malformed':
      return "its placement ticket's signature is not one the control worker makes";
    case 'unknown-key':
      return `its placement ticket was signed with key ${verdict.keyId}, which is not in this agent's key file`;
    case 'mismatch':
      return `its placement ticket does not match its signature (key ${verdict.keyId}): it was changed after the control worker signed it`;
    default: {
      const unknown: never = verdict;
      throw new Error(`unknown verdict ${JSON.stringify(unknown)}`);
    }
  }
}

/**
 * What a ticket says, without checking its signature: only for a ticket this agent verified
 * before it started the shard (the spec in its own state dir), e.g. to learn its peers.
 */
export function readPlacementTicket(text: string): PlacementTicket | undefined {
  const ticket = readStatement(FORM, text);
  // An optional field of '' is never signed (withoutEmpty), so a ticket naming one was not made here.
  return ticket && ticket.keyChain !== '' && ticket.leaderKey !== '' ? ticket : undefined;
}

export function verifyPlacementTicket(text: string, keys: CatalogKey[]): TicketVerdict {
  if (text === '') return { ok: false, why: 'it carries no placement ticket (only placements the control worker made start here)' };
  if (!readPlacementTicket(text)) return { ok: false, why: 'its placement ticket is malformed' };
  const opened = openStatement(FORM, text, keys);
  if (!opened.ok) return { ok: false, why: verdictWhy(opened) };
  return { ok: true, ticket: opened.statement, legacy: opened.legacy };
}

/** A ticket older than this starts no new engine (a running one is adopted on its recorded ticket). */
export const NEW_START_TICKET_MAX_AGE_MS = 5 * 60_000;

/** What the agent knows besides the start itself; each fact left out is not checked (unit tests). */
export interface StartFacts {
  /** The workflow that sent the start and its run chain (from Temporal, not from the start). */
  caller?: { workflowId: string; chain: string };
  /** The agent's own advertised address: a ticket for any other is not for this host. */
  ownAddress?: string;
  /** Whether no spec of this shard is recorded here (a new engine), and the time now. */
  newStart?: boolean;
  now?: number;
}

/**
 * Every way `spec` differs from what its ticket allows ([] when it may start), given what the
 * agent knows: a ticket copied out of a history into a start from another workflow or another
 * run chain (an old replica's ticket replayed under its reused id), for another host, another
 * node, other GPUs or another leader, or too old to start a new engine, does not hold.
 */
export function ticketMismatches(ticket: PlacementTicket, spec: StartShard, facts: StartFacts): string[] {
  const problems: string[] = [];
  const differs = (what: string, given: unknown, signed: unknown): void => {
    if (JSON.stringify(given) !== JSON.stringify(signed)) {
      problems.push(`its ${what} ${JSON.stringify(given)} is not the placed ${JSON.stringify(signed)}`);
    }
  };
  const { caller } = facts;
  if (caller !== undefined && caller.workflowId !== ticket.replicaId) {
    problems.push(`it was sent by workflow ${caller.workflowId}, but its ticket is replica ${ticket.replicaId}'s`);
  } else if (caller !== undefined && caller.chain !== ticket.chain) {
    problems.push(
      `it was sent by run chain ${caller.chain} of ${caller.workflowId}, but its ticket is chain ${ticket.chain || '(none)'}'s: a replica id used again does not inherit its old tickets`,
    );
  }
  if (facts.ownAddress !== undefined && ticket.address !== facts.ownAddress) {
    problems.push(`its ticket places it at address ${JSON.stringify(ticket.address)}, but this agent's address is ${facts.ownAddress}`);
  }
  if (facts.newStart && facts.now !== undefined && facts.now - ticket.issuedAt > NEW_START_TICKET_MAX_AGE_MS) {
    const minutes = Math.round((facts.now - ticket.issuedAt) / 60_000);
    problems.push(
      `its ticket was issued ${minutes} min ago: a new engine starts only on a ticket of the last ${NEW_START_TICKET_MAX_AGE_MS / 60_000} min`,
    );
  }
  differs('replica', spec.replicaId, ticket.replicaId);
  differs('notified workflow', spec.notifyWorkflowId, ticket.replicaId);
  differs('shard', spec.shardId, ticket.shardId);
  differs('node', spec.nodeId, ticket.nodeId);
  differs('rank', spec.rank, ticket.rank);
  differs('node count', spec.nnodes, ticket.nnodes);
  differs('GPUs', [...spec.gpuIndices], ticket.gpus);
  differs('HCAs', [...spec.hcas], ticket.hcas);
  differs('httpPort', spec.httpPort, ticket.httpPort);
  if (spec.leaderAddress !== ticket.leaderAddress) {
    problems.push(
      `its leader address ${JSON.stringify(spec.leaderAddress)} is not the registered address of its placement's rank 0 (${ticket.leaderAddress ? `${ticket.leaderAddress}, node ${ticket.leaderNode}` : 'none: a single-node replica'})`,
    );
  }
  differs('revision', spec.profile?.signature ?? '', ticket.revision);
  differs('served name', spec.profile?.servedName ?? '', ticket.servedName);
  differs('deployment', spec.deployment, ticket.deployment);
  if (ticket.leaderKey && spec.rank > 0) {
    const problem = endpointAttestationProblem(
      spec.leaderAttestation || undefined,
      ticket.leaderKey,
      {
        nodeId: ticket.leaderNode,
        replicaId: ticket.replicaId,
        chain: ticket.chain,
        address: ticket.leaderAddress,
        port: spec.leaderPort,
        ticketIssuedAt: ticket.issuedAt,
      },
      RENDEZVOUS_DOMAIN,
    );
    if (problem) problems.push(`its leader port ${spec.leaderPort} is not the one rank 0's agent chose: ${problem}`);
  }
  return problems;
}
