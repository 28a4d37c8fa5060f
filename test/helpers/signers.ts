// What the signing unit tests share: an agent's own key (made as the agent makes it, in a state
// dir of its own) and the keyring it signs with, a control worker's key file, and the endpoint
// attestation of replica/chat/3's rank 0 on gpu-5 that those tests vary one field at a time.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AGENT_KEY_FILE, loadOrCreateAgentKey, type AgentIdentity } from '../../common/agent-identity.js';
import { ensureCatalogKeyFile, readCatalogKeys, type CatalogKeyring } from '../../common/catalog-key.js';
import type { EndpointAttestation } from '../../common/endpoint-attestation.js';

/** A fresh agent key pair, as an agent makes it at first start. */
export const newAgent = (): AgentIdentity => loadOrCreateAgentKey(mkdtempSync(join(tmpdir(), 'llmgw-agent-')));

/** The keyring an agent signs its own statements with: its key alone. */
export const agentRing = (identity: AgentIdentity): CatalogKeyring => ({
  file: AGENT_KEY_FILE,
  signing: identity.key,
  all: [identity.key],
});

/** A control worker's private key file, made as `llmgw up` makes one, and its keys. */
export function workerKey(): { file: string; keys: CatalogKeyring } {
  const file = join(mkdtempSync(join(tmpdir(), 'llmgw-worker-key-')), 'catalog.key');
  ensureCatalogKeyFile(file);
  return { file, keys: readCatalogKeys(file) };
}

/** Rank 0 of replica/chat/3 (run chain run-first) serving on gpu-5 at 10.0.0.5:30007, attested at `issuedAt`. */
export function chatAttestation(issuedAt: number): EndpointAttestation {
  return {
    nodeId: 'gpu-5',
    replicaId: 'replica/chat/3',
    chain: 'run-first',
    shardId: 'chat.3.r0.a1',
    address: '10.0.0.5',
    port: 30007,
    issuedAt,
  };
}
