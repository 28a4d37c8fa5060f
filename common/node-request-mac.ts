// The control worker's MAC on the GPU Updates that free or take GPUs on a node workflow
// (release, claim, reconcileAllocations, awake): anyone who can write to the namespace can send them,
// and a release of a live engine's shard would have placement hand its GPUs out twice
// (docs/signed-statements.md, "GPU Updates carry the control worker's MAC"). Control side only:
// the key is derived from the catalog signing key under a label of its own; it never enters a
// payload, and the node workflow has it checked by a local activity (workflows/node/requests.ts).
import { createHmac, timingSafeEqual } from 'node:crypto';
import { canSign, type CatalogKeyring } from './catalog-key.js';
import { canonicalJson, macKey } from './carried-seal.js';
import { NODE_REQUEST_PROOF_FORM } from './node-types.js';

/** The Updates it covers; reserve is not among them (it takes only free GPUs). `awake`: a sharing engine's wake permit and its sleep. */
export type NodeRequestKind = 'release' | 'claim' | 'reconcileAllocations' | 'awake';

/** How long a MAC holds: a genuine request copied out of a history replays for at most this. */
export const NODE_REQUEST_TTL_MS = 5 * 60_000;

const VERSION = 'v1';
const HKDF_LABEL = 'llmgw node request mac v1';
const DOMAIN = 'llmgw node request v1\n';

function mac(key: Buffer, nodeId: string, kind: NodeRequestKind, expiresAt: number, request: unknown): Buffer {
  return createHmac('sha256', key)
    .update(DOMAIN)
    .update(`${JSON.stringify([nodeId, kind, expiresAt])}\n`)
    .update(canonicalJson(request))
    .digest();
}

/** The request without its proof: what the MAC covers. */
export function withoutProof(request: object): object {
  const { proof: _proof, ...rest } = request as { proof?: unknown };
  return rest;
}

/** The proof for `request` (its proof field left out) to node `nodeId`, valid for NODE_REQUEST_TTL_MS. */
export function signNodeRequest(ring: CatalogKeyring, nodeId: string, kind: NodeRequestKind, request: object, now = Date.now()): string {
  const key = ring.signing ? macKey(ring.signing, HKDF_LABEL) : undefined;
  if (!ring.signing || !key)
    throw new Error(`the catalog key file ${ring.file} holds no key that can sign: nothing to sign node requests with`);
  const expiresAt = now + NODE_REQUEST_TTL_MS;
  return `${VERSION}.${ring.signing.id}.${expiresAt}.${mac(key, nodeId, kind, expiresAt, withoutProof(request)).toString('base64url')}`;
}

export type NodeRequestVerdict = { ok: true } | { ok: false; why: string };

/** Whether `request.proof` is this keyring's MAC over the rest of `request`, for this node and kind, unexpired. */
export function verifyNodeRequest(
  ring: CatalogKeyring,
  nodeId: string,
  kind: NodeRequestKind,
  request: object,
  now = Date.now(),
): NodeRequestVerdict {
  const { proof } = request as { proof?: unknown };
  if (!proof) return { ok: false, why: 'it carries no proof (only the control worker frees or claims GPUs)' };
  if (typeof proof !== 'string' || !NODE_REQUEST_PROOF_FORM.test(proof))
    return { ok: false, why: 'its proof is not a v1 node-request MAC' };
  const [, keyId, expires, encoded] = proof.split('.') as [string, string, string, string];
  const expiresAt = Number(expires);
  if (expiresAt < now) return { ok: false, why: `its proof expired ${Math.round((now - expiresAt) / 1000)} s ago` };
  if (expiresAt > now + 2 * NODE_REQUEST_TTL_MS) return { ok: false, why: 'its proof expires further ahead than the control worker signs' };
  const key = ring.all.find((k) => k.id === keyId && canSign(k));
  const secret = key ? macKey(key, HKDF_LABEL) : undefined;
  if (!secret) return { ok: false, why: `its proof was made with key ${keyId}, which this control worker does not hold` };
  const given = Buffer.from(encoded, 'base64url');
  const expected = mac(secret, nodeId, kind, expiresAt, withoutProof(request));
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) {
    return { ok: false, why: `its proof does not match: it was not made for this ${kind} of node ${nodeId}` };
  }
  return { ok: true };
}
