// The agent's identity on its host: its own key pair (made in the state dir at first start), the
// line it prints so the operator can enroll it, and, where it was given the catalog private key
// (`llmgw up`, tests), the enrollment it signs for itself. Agent side.
import { loadOrCreateAgentKey, signEnrollment, signRegistration, type AgentIdentity } from '../../common/agent-identity.js';
import { readCatalogKeys } from '../../common/catalog-key.js';
import type { LineLog } from '../../common/logger.js';
import type { AgentEnrollment, RegisterProof } from '../../common/node-types.js';
import type { Register } from '../../proto/gen/llmgw/v1/register_pb.js';
import type { AgentConfig } from '../config.js';

/** The agent's key pair, and its signature over a registration (its enrollment added when it made one). */
export function loadAgentIdentity(
  config: AgentConfig,
  log: LineLog,
): { identity: AgentIdentity; sign: (report: Register) => RegisterProof } {
  const identity = loadOrCreateAgentKey(config.stateDir);
  let enrollment: AgentEnrollment | undefined;
  if (config.enrollWithCatalogKey) {
    // Signed once, and the keyring dropped: the agent keeps no catalog private key in memory.
    enrollment = signEnrollment(config.nodeId, identity.publicKey, readCatalogKeys(config.enrollWithCatalogKey));
    log(`agent key ${identity.publicKey}: enrolled with the catalog key of ${config.enrollWithCatalogKey}`);
  } else {
    log(`agent key ${identity.publicKey}: enroll it once with \`llmgw nodes enroll ${config.nodeId} ${identity.publicKey}\``);
  }
  return { identity, sign: (report) => signRegistration(report, identity, enrollment) };
}
