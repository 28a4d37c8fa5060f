// Placement tickets: the control worker's signature over where one shard runs — the replica's
// workflow, the node, shard and rank, the GPUs, the ports, the leader's registered address and
// the revision — made when placement reserved the GPUs (activities/placement.ts), checked by the
// agent before it writes a spec or spawns anything (agent/placement-ticket.ts). Process side.
import type { StartShard } from '../proto/gen/llmgw/v1/shard_pb.js';
import type { CatalogKey, CatalogKeyring } from './catalog-key.js';
import { signStatement, verifyStatement, type SignatureVerdict } from './signature.js';

const DOMAIN = 'llmgw placement v1';

export interface PlacementTicket {
  /** The replica workflow the shard belongs to: the only workflow whose startShard may carry it. */
  replicaId: string;
  /** The run that placed it (for the record: a restart after continue-as-new is another run). */
  placedByRun: string;
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
}

const FIELDS: (keyof PlacementTicket)[] = [
  'replicaId',
  'placedByRun',
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
];

/** The signed bytes: every field, in one fixed order. */
function canonical(ticket: PlacementTicket): string {
  return JSON.stringify(FIELDS.map((field) => [field, ticket[field]]));
}

/** `<base64url JSON>.<signature>`: readable by anyone, made only by the control worker. */
export function signPlacementTicket(ticket: PlacementTicket, keyring: CatalogKeyring): string {
  const body = Buffer.from(canonical(ticket), 'utf8').toString('base64url');
  return `${body}.${signStatement(DOMAIN, canonical(ticket), keyring)}`;
}

export type TicketVerdict = { ok: true; ticket: PlacementTicket; legacy: boolean } | { ok: false; why: string };

function parse(body: string): PlacementTicket | undefined {
  try {
    const pairs = JSON.parse(Buffer.from(body, 'base64url').toString('utf8')) as unknown;
    if (!Array.isArray(pairs) || pairs.length !== FIELDS.length) return undefined;
    const ticket: Record<string, unknown> = {};
    for (const [index, pair] of pairs.entries()) {
      if (!Array.isArray(pair) || pair[0] !== FIELDS[index]) return undefined;
      ticket[FIELDS[index]!] = pair[1];
    }
    return ticket as unknown as PlacementTicket;
  } catch {
    return undefined;
  }
}

function verdictWhy(verdict: Exclude<SignatureVerdict, { ok: true }>): string {
  switch (verdict.why) {
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

export function verifyPlacementTicket(text: string, keys: CatalogKey[]): TicketVerdict {
  if (text === '') return { ok: false, why: 'it carries no placement ticket (only placements the control worker made start here)' };
  const dot = text.indexOf('.');
  const ticket = dot > 0 ? parse(text.slice(0, dot)) : undefined;
  if (!ticket) return { ok: false, why: 'its placement ticket is malformed' };
  const verdict = verifyStatement(DOMAIN, canonical(ticket), text.slice(dot + 1), keys);
  if (!verdict.ok) return { ok: false, why: verdictWhy(verdict) };
  return { ok: true, ticket, legacy: verdict.legacy };
}

/**
 * Every way `spec` differs from what its ticket allows ([] when it may start), `caller` being
 * the workflow that sent it where known: a ticket copied out of a history into a start from
 * another workflow, another node, other GPUs or another leader does not hold.
 */
export function ticketMismatches(ticket: PlacementTicket, spec: StartShard, caller: string | undefined): string[] {
  const problems: string[] = [];
  const differs = (what: string, given: unknown, signed: unknown): void => {
    if (JSON.stringify(given) !== JSON.stringify(signed)) {
      problems.push(`its ${what} ${JSON.stringify(given)} is not the placed ${JSON.stringify(signed)}`);
    }
  };
  if (caller !== undefined && caller !== ticket.replicaId) {
    problems.push(`it was sent by workflow ${caller}, but its ticket is replica ${ticket.replicaId}'s`);
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
  return problems;
}
