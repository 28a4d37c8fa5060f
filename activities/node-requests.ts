// The control worker's side of MAC'd GPU Updates (common/node-request-mac.ts): `signedNodeRequest`
// for the activities that send release, claim or reconcileAllocations, and the local activity
// `checkNodeRequest` the node workflow verifies them with (workflows/node/requests.ts). Control
// side. A worker with no catalog key signs nothing and accepts every request, as before.
import { readCatalogKeys } from '../common/catalog-key.js';
import { signNodeRequest, verifyNodeRequest, type NodeRequestKind } from '../common/node-request-mac.js';

/** `request` with the control worker's proof for node `nodeId` (unchanged without a key). */
export function signedNodeRequest<T extends object>(
  catalogKeyFile: string | undefined,
  nodeId: string,
  kind: NodeRequestKind,
  request: T,
): NoInfer<T> & { proof?: string } {
  if (catalogKeyFile === undefined) return request;
  return { ...request, proof: signNodeRequest(readCatalogKeys(catalogKeyFile), nodeId, kind, request) };
}

export interface NodeRequestCheck {
  nodeId: string;
  kind: NodeRequestKind;
  request: object;
}

/** `keyed`: whether this worker checks proofs at all (the node's validator then refuses none given). */
export type NodeRequestCheckVerdict = { ok: true; keyed: boolean } | { ok: false; keyed: true; why: string };

export function createNodeRequestActivities(catalogKeyFile: string | undefined) {
  return {
    async checkNodeRequest({ nodeId, kind, request }: NodeRequestCheck): Promise<NodeRequestCheckVerdict> {
      if (catalogKeyFile === undefined) return { ok: true, keyed: false };
      const verdict = verifyNodeRequest(readCatalogKeys(catalogKeyFile), nodeId, kind, request);
      return verdict.ok ? { ok: true, keyed: true } : { ok: false, keyed: true, why: verdict.why };
    },
  };
}
