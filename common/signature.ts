// Signatures of the control plane over what it decided (a revision, a placement ticket, a
// route): `v2.<key id>.<Ed25519>` with the control worker's private key, or `v1.<key id>.<HMAC>`
// with the legacy shared key during the move to Ed25519. Process side (node:crypto). Each kind
// of statement has its own domain string, so a signature over one can never pass for another.
import { createHmac, sign as edSign, timingSafeEqual, verify as edVerify } from 'node:crypto';
import type { CatalogKey, CatalogKeyring } from './catalog-key.js';

export type SignatureVerdict =
  | { ok: true; keyId: string; legacy: boolean }
  | { ok: false; why: 'unsigned' }
  | { ok: false; why: 'malformed' }
  | { ok: false; why: 'unknown-key'; keyId: string }
  | { ok: false; why: 'mismatch'; keyId: string };

function message(domain: string, payload: string): Buffer {
  return Buffer.from(`${domain}\n${payload}`, 'utf8');
}

function mac(secret: Buffer, domain: string, payload: string): Buffer {
  return createHmac('sha256', secret).update(message(domain, payload)).digest();
}

/** Signs `payload` under `domain` with the keyring's signing key; throws when it has none. */
export function signStatement(domain: string, payload: string, keyring: CatalogKeyring): string {
  const key = keyring.signing;
  if (!key) throw new Error(`the catalog key file ${keyring.file} holds no key that can sign (public keys only)`);
  if (key.kind === 'hmac') return `v1.${key.id}.${mac(key.secret, domain, payload).toString('base64url')}`;
  return `v2.${key.id}.${edSign(null, message(domain, payload), key.privateKey!).toString('base64url')}`;
}

export function verifyStatement(domain: string, payload: string, signature: string, keys: CatalogKey[]): SignatureVerdict {
  if (signature === '') return { ok: false, why: 'unsigned' };
  const match = /^(v1|v2)\.([0-9a-f]{12})\.([A-Za-z0-9_-]+)$/.exec(signature);
  if (!match) return { ok: false, why: 'malformed' };
  const [, version, id, encoded] = match as unknown as [string, 'v1' | 'v2', string, string];
  const key = keys.find((k) => k.id === id && k.kind === (version === 'v1' ? 'hmac' : 'ed25519'));
  if (!key) return { ok: false, why: 'unknown-key', keyId: id };
  const given = Buffer.from(encoded, 'base64url');
  let good: boolean;
  if (key.kind === 'hmac') {
    const expected = mac(key.secret, domain, payload);
    good = given.length === expected.length && timingSafeEqual(given, expected);
  } else {
    good = given.length === 64 && edVerify(null, message(domain, payload), key.publicKey, given);
  }
  return good ? { ok: true, keyId: id, legacy: key.kind === 'hmac' } : { ok: false, why: 'mismatch', keyId: id };
}
