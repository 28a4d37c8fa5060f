// The route signer's check that rank 0's endpoint is the one its agent attested: the port travels
// back from the agent unsigned (startShard's result, then the replica's state), so whoever can
// complete an activity on `agent/<node>` could name another port on that host. A route is signed
// only for an endpoint whose attestation verifies against the node's enrolled agent key (the
// enrollment itself checked against the catalog key, as checkRegistration does), for the live
// chain and that shard. Control side (docs/signed-statements.md, "Endpoint attestations").
import type { Client } from '@temporalio/client';
import { enrollmentProblem } from '../common/agent-identity.js';
import type { CatalogKey } from '../common/catalog-key.js';
import { attestedTlsFingerprint, endpointAttestationProblem } from '../common/endpoint-attestation.js';
import { isTlsPin } from '../common/engine-tls.js';
import { nodeWorkflowId } from '../common/names.js';
import type { PlacementTicket } from '../common/placement-ticket.js';
import type { ShardPlacement } from '../common/replica-types.js';
import { describeNodeQuery } from '../workflows/definitions.js';

/** `tlsPin`: the engine serves HTTPS with the certificate of this pin, in the agent's own word. */
export type EndpointVerdict = { attested: true; tlsPin?: string } | { attested: false; trusted: string } | { refused: string };

/** The node's enrolled agent key, verified against the catalog key, or why there is none. */
async function enrolledKey(
  client: Client,
  nodeId: string,
  catalogKeys: CatalogKey[],
  queue: string | undefined,
): Promise<string | { none: string }> {
  const handle = client.workflow.getHandle(nodeWorkflowId(nodeId));
  const description = await handle.describe().catch(() => undefined);
  if (!description || description.status.name !== 'RUNNING') return { none: `node ${nodeId} has no running node workflow` };
  // A `node` workflow of someone else's (another type, or on another queue) vouches for nothing.
  if (description.type !== 'node' || (queue !== undefined && description.taskQueue !== queue))
    return { none: `node/${nodeId} is a ${description.type} workflow on task queue ${description.taskQueue}, not this control plane's` };
  const view = await handle.query(describeNodeQuery);
  if (!view.enrollment) return { none: `node ${nodeId} has no enrolled agent key` };
  const problem = enrollmentProblem(nodeId, view.enrollment, catalogKeys);
  if (problem) return { none: `node ${nodeId}'s enrollment is not the operator's: ${problem}` };
  return view.enrollment.publicKey;
}

/**
 * Whether `leader`'s endpoint (`url`, already on the ticket's address) is attested by its agent.
 * A node with no enrolled key is `trusted` only on a worker that trusts unenrolled agents
 * (`--trust-unenrolled-agents`, or no catalog key: 0.2.0 agents sign nothing), as before.
 */
export async function checkAttestedEndpoint(
  client: Client,
  args: {
    replicaId: string;
    chain: string;
    leader: ShardPlacement;
    ticket: PlacementTicket;
    url: URL;
    catalogKeys: CatalogKey[];
    trustUnenrolled: boolean;
    queue: string | undefined;
  },
): Promise<EndpointVerdict> {
  const { replicaId, chain, leader, ticket, url } = args;
  const key = await enrolledKey(client, ticket.nodeId, args.catalogKeys, args.queue);
  if (typeof key !== 'string') {
    if (args.trustUnenrolled) return { attested: false, trusted: `${key.none}; routed unattested (--trust-unenrolled-agents)` };
    return { refused: `${replicaId}'s endpoint ${url.origin} cannot be attested: ${key.none}` };
  }
  const problem = endpointAttestationProblem(leader.attestation, key, {
    nodeId: ticket.nodeId,
    replicaId,
    chain,
    shardId: leader.shardId,
    address: url.hostname,
    port: Number(url.port),
    ticketIssuedAt: ticket.issuedAt,
  });
  if (problem) return { refused: `${replicaId}'s endpoint ${url.origin} is not attested by its agent: ${problem}` };
  const tlsPin = attestedTlsFingerprint(leader.attestation!);
  if (tlsPin === undefined) return { attested: true };
  if (!isTlsPin(tlsPin)) return { refused: `${replicaId}'s endpoint ${url.origin} is attested with a malformed certificate pin` };
  return { attested: true, tlsPin };
}
