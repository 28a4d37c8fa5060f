// `llmgw nodes enroll NODE KEY` and `llmgw agent keygen`: an agent's own key pair, made on its
// host, and the operator's enrollment of its public key, signed with the catalog private key and
// recorded by the node workflow (workflows/node/enrollment.ts). CLI side.
import { hostname } from 'node:os';
import { resolve } from 'node:path';
import { WorkflowNotFoundError } from '@temporalio/client';
import { loadOrCreateAgentKey, normalisePublicKey, signEnrollment } from '../../common/agent-identity.js';
import { readCatalogKeys } from '../../common/catalog-key.js';
import { nodeWorkflowId } from '../../common/names.js';
import { enrollUpdate } from '../../workflows/definitions.js';
import { withClient } from './client.js';

/** Makes (or keeps) the agent's key in its state dir and prints the public key. */
export function agentKeygen(opts: { nodeId?: string; stateDir?: string }): void {
  const nodeId = opts.nodeId ?? hostname();
  const identity = loadOrCreateAgentKey(resolve(opts.stateDir ?? `.llmgw/agents/${nodeId}`));
  console.log(identity.publicKey);
}

export async function enrollCommand(nodeId: string, publicKey: string, opts: { catalogKeyFile?: string }): Promise<void> {
  if (!opts.catalogKeyFile)
    throw new Error('enrolling signs with the catalog private key: give --catalog-key-file FILE (or LLMGW_CATALOG_KEY_FILE)');
  const keyring = readCatalogKeys(opts.catalogKeyFile);
  if (!keyring.signing) throw new Error(`${opts.catalogKeyFile} holds no key that can sign: give the control worker's private key file`);
  const enrollment = signEnrollment(nodeId, normalisePublicKey(publicKey), keyring);
  const view = await withClient(async (client) => {
    try {
      return await client.workflow.getHandle(nodeWorkflowId(nodeId)).executeUpdate(enrollUpdate, { args: [enrollment] });
    } catch (error) {
      if (error instanceof WorkflowNotFoundError)
        throw new Error(`no node ${nodeId}: start its agent first (it registers, unenrolled), then enroll it`, { cause: error });
      throw error;
    }
  });
  console.log(
    view.enrolled
      ? `enrolled ${nodeId}: its registrations are verified against ${enrollment.publicKey}, and placement may use it`
      : `enrolled ${enrollment.publicKey} for ${nodeId}: placement uses it once its agent's next signed registration comes (within a minute)`,
  );
}
