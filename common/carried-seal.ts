// The MAC on state a long-running workflow carries into its next run (docs/signed-statements.md, "Carried
// state is sealed"). Control side only: the key is derived from the control worker's catalog
// signing key, which agents and routers never hold, and never enters a payload.
import { createHmac, hkdfSync, timingSafeEqual } from 'node:crypto';
import { canSign, type CatalogKey, type CatalogKeyring } from './catalog-key.js';

/**
 * Which hand-over a seal is for. `runId` is the run that seals, which is the next run's
 * `continuedFromExecutionRunId`: only that run's own continue-as-new can carry the seal, and only
 * into its own workflow id, type and chain.
 */
export interface SealBinding {
  workflowType: string;
  workflowId: string;
  firstExecutionRunId: string;
  runId: string;
}

export type SealVerdict = { ok: true } | { ok: false; why: string };

const VERSION = 'v1';
// Its own HKDF label: the MAC key shares nothing usable with the Ed25519 signatures made with
// the same key material, and a key derived for anything else under another label differs.
const HKDF_INFO = 'llmgw carried-state mac v1';
const DOMAIN = 'llmgw carried state v1\n';
// DER prefix of an Ed25519 PKCS#8 key (RFC 8410): the 32-byte seed follows it.
const PKCS8_ED25519_LENGTH = 16;

function keyMaterial(key: CatalogKey): Buffer | undefined {
  if (key.kind === 'hmac') return key.secret;
  return key.privateKey?.export({ format: 'der', type: 'pkcs8' }).subarray(PKCS8_ED25519_LENGTH);
}

/**
 * The HMAC key derived from a signing key under `label` (undefined for a key that cannot sign).
 * Each use has its own label (common/node-request-mac.ts has another), so no MAC passes for another's.
 */
export function macKey(key: CatalogKey, label: string = HKDF_INFO): Buffer | undefined {
  const material = keyMaterial(key);
  return material ? Buffer.from(hkdfSync('sha256', material, Buffer.alloc(0), label, 32)) : undefined;
}

/** JSON with object keys sorted: the same state gives the same bytes, however it was decoded. */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map((item) => (item === undefined ? 'null' : canonicalJson(item))).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>)
      .filter(([, item]) => item !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([key, item]) => `${JSON.stringify(key)}:${canonicalJson(item)}`).join(',')}}`;
  }
  return JSON.stringify(value) ?? 'null';
}

function mac(key: Buffer, binding: SealBinding, input: unknown): Buffer {
  const { workflowType, workflowId, firstExecutionRunId, runId } = binding;
  return createHmac('sha256', key)
    .update(DOMAIN)
    .update(`${JSON.stringify([workflowType, workflowId, firstExecutionRunId, runId])}\n`)
    .update(canonicalJson(input))
    .digest();
}

/** `v1.<key id>.<mac>` over the binding and the whole next-run input, with the keyring's signing key. */
export function sealCarried(ring: CatalogKeyring, binding: SealBinding, input: unknown): string {
  const key = ring.signing ? macKey(ring.signing) : undefined;
  if (!ring.signing || !key) throw new Error(`the catalog key file ${ring.file} holds no key that can sign: nothing to seal with`);
  return `${VERSION}.${ring.signing.id}.${mac(key, binding, input).toString('base64url')}`;
}

/** Whether `seal` is this keyring's MAC over `input` for this binding; any key that can sign may have made it (rotation). */
export function openCarried(ring: CatalogKeyring, binding: SealBinding, input: unknown, seal: string | undefined): SealVerdict {
  if (!seal) return { ok: false, why: 'it carries no seal' };
  const [version, keyId, encoded, extra] = seal.split('.');
  if (version !== VERSION || !keyId || !encoded || extra !== undefined) return { ok: false, why: 'its seal is not a v1 seal' };
  const key = ring.all.find((k) => k.id === keyId && canSign(k));
  const secret = key ? macKey(key) : undefined;
  if (!secret) return { ok: false, why: `it is sealed with key ${keyId}, which this control worker does not hold` };
  const given = Buffer.from(encoded, 'base64url');
  const expected = mac(secret, binding, input);
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) {
    return { ok: false, why: 'its seal does not match: it was not sealed for this state, workflow and run' };
  }
  return { ok: true };
}
