// Endpoint attestations: an agent's own signature (its enrolled Ed25519 key) over the address and
// port where one shard's engine listens, for one replica run chain. The agent makes one in
// waitHealthy's answer (agent/endpoint-attester.ts); the route signer routes only to an endpoint
// whose attestation verifies against the node's enrolled key (activities/endpoint-check.ts), so a
// port altered between the agent and the route signer moves no traffic. Process side.
import type { CatalogKeyring } from './catalog-key.js';
import {
  fieldMismatches,
  openingProblem,
  openStatement,
  readStatement,
  signedStatement,
  windowProblems,
  type StatementForm,
} from './signed-statement.js';

const DOMAIN = 'llmgw endpoint attestation v1';
/**
 * Rank 0's rendezvous address and port (Ray's head, SGLang's --dist-init-addr), signed the same
 * way under a domain of its own, so that an engine's attested endpoint never passes for it.
 */
export const RENDEZVOUS_DOMAIN = 'llmgw rendezvous attestation v1';

/**
 * How far an attestation may predate its placement ticket's renewal (hosts' clocks differ): a
 * genuine one is made after the renewal that precedes every start and adoption.
 */
export const ATTESTATION_CLOCK_SKEW_MS = 5 * 60_000;

export interface EndpointAttestation {
  nodeId: string;
  /** The replica workflow that asked (waitHealthy's caller), which the shard's spec names. */
  replicaId: string;
  /** That workflow's run chain (its first run's id), as Temporal describes the caller. */
  chain: string;
  shardId: string;
  /** The agent's advertised address (--advertise-addr). */
  address: string;
  port: number;
  /** When it was signed (ms since the epoch). */
  issuedAt: number;
  /**
   * The SHA-256 pin of the certificate the engine serves HTTPS with (--engine-tls): the route
   * signer carries it into the signed route, and routers accept that certificate alone.
   */
  tlsFingerprint?: string;
}

/** The signed fields, in one fixed order; the rendezvous attestation signs the same under its own domain. */
const form = (domain: string): StatementForm<EndpointAttestation> => ({
  domain,
  fields: ['nodeId', 'replicaId', 'chain', 'shardId', 'address', 'port', 'issuedAt'],
  // Signed after the others, and only when set: every attestation made before it still verifies.
  optional: ['tlsFingerprint'],
});

/** `<base64url JSON>.<signature>`: readable by anyone, made only with the agent's key. */
export function signEndpointAttestation(attestation: EndpointAttestation, agentKey: CatalogKeyring, domain = DOMAIN): string {
  return signedStatement(form(domain), attestation, agentKey);
}

/**
 * What the route signer expects an attestation to say: the endpoint it would route to, and whose;
 * `ticketIssuedAt` is the rank 0 ticket's issuedAt: the attestation answers a start or adoption after it.
 */
export type AttestedEndpoint = Omit<EndpointAttestation, 'issuedAt'> & { ticketIssuedAt: number };
/** A worker rank does not know rank 0's shard id: the rest binds the rendezvous. */
export type AttestedRendezvous = Omit<AttestedEndpoint, 'shardId'>;

/**
 * Why `text` does not attest `expected` under the enrolled `agentKey` (`ed25519-public:…`), or
 * undefined when it does: its signature, then every field, each mismatch named.
 */
export function endpointAttestationProblem(
  text: string | undefined,
  agentKey: string,
  expected: AttestedEndpoint | AttestedRendezvous,
  domain = DOMAIN,
): string | undefined {
  if (!text)
    return `no endpoint attestation from node ${expected.nodeId}'s agent (an agent older than this check, or not its agent at all)`;
  const opened = openStatement(form(domain), text, agentKey);
  if (!opened.ok) return openingProblem(opened, 'its endpoint attestation', `node ${expected.nodeId}'s enrolled key`);
  const said = opened.statement;
  const problems = [
    ...fieldMismatches(said, expected, ['nodeId', 'replicaId', 'chain', 'shardId', 'address', 'port'], 'attests'),
    ...windowProblems(said.issuedAt, {
      notBefore: {
        at: expected.ticketIssuedAt - ATTESTATION_CLOCK_SKEW_MS,
        earlier: "before its placement ticket was last renewed (an earlier engine's)",
      },
    }),
  ];
  return problems.length ? `its endpoint attestation ${problems.join('; ')}` : undefined;
}

/**
 * The certificate pin `text` attests (undefined: the engine serves plain HTTP). Read it only from
 * an attestation endpointAttestationProblem accepted: unverified, it is anyone's word.
 */
export function attestedTlsFingerprint(text: string): string | undefined {
  return readStatement(form(DOMAIN), text)?.tlsFingerprint;
}
