// Signatures of the revisions the catalog allows: the control worker signs each profile it
// resolves from the catalog, and an agent starts a StartShard only when its profile's
// signature verifies. Process side (node:crypto); workflows only carry the signature along.
// The design, what it protects and what it does not, is in docs/security.md.
import { createHmac, timingSafeEqual } from 'node:crypto';
import { clone, toJson, type JsonValue } from '@bufbuild/protobuf';
import { EngineProfileSchema, type EngineProfile } from '../proto/gen/llmgw/v1/shard_pb.js';
import type { CatalogKey, CatalogKeyring } from './catalog-key.js';
import { engineProfileFromSnapshot } from './profile-conversion.js';
import type { ProfileSnapshot } from './replica-types.js';

const VERSION = 'v1';
const DOMAIN = 'llmgw revision v1\n';

function sorted(value: JsonValue): JsonValue {
  if (Array.isArray(value)) return value.map(sorted);
  if (value !== null && typeof value === 'object') {
    const out: { [key: string]: JsonValue } = {};
    for (const key of Object.keys(value).sort()) out[key] = sorted(value[key]!);
    return out;
  }
  return value;
}

/**
 * The bytes a signature covers: the profile as proto3 JSON (every field but the signature:
 * engine, model and source, served name, GPU class, parallelism, launcher, args, literal env
 * values and the names of host variables, timeouts), keys sorted. Fields left at their default
 * are omitted, so a field added to the proto later changes nothing for profiles that leave it
 * unset; one an older agent does not know makes the signature fail there, which is the point.
 */
export function canonicalRevision(profile: EngineProfile): string {
  const unsigned = clone(EngineProfileSchema, profile);
  unsigned.signature = '';
  return JSON.stringify(sorted(toJson(EngineProfileSchema, unsigned)));
}

function mac(key: CatalogKey, profile: EngineProfile): Buffer {
  return createHmac('sha256', key.secret).update(DOMAIN).update(canonicalRevision(profile)).digest();
}

/** `v1.<key id>.<HMAC-SHA256, base64url>` with the keyring's signing key. */
export function signRevision(profile: EngineProfile, keyring: CatalogKeyring): string {
  return `${VERSION}.${keyring.signing.id}.${mac(keyring.signing, profile).toString('base64url')}`;
}

/** The snapshot with its signature: what resolveDeployment hands to the deployment. */
export function signSnapshot(snapshot: ProfileSnapshot, keyring: CatalogKeyring): ProfileSnapshot {
  const unsigned: ProfileSnapshot = { ...snapshot, signature: '' };
  return { ...snapshot, signature: signRevision(engineProfileFromSnapshot(unsigned), keyring) };
}

export type RevisionVerdict =
  | { ok: true; keyId: string }
  | { ok: false; why: 'unsigned' }
  | { ok: false; why: 'malformed' }
  | { ok: false; why: 'unknown-key'; keyId: string }
  | { ok: false; why: 'mismatch'; keyId: string };

export function verifyRevision(profile: EngineProfile, keys: CatalogKey[]): RevisionVerdict {
  if (profile.signature === '') return { ok: false, why: 'unsigned' };
  const match = /^v1\.([0-9a-f]{12})\.([A-Za-z0-9_-]+)$/.exec(profile.signature);
  if (!match) return { ok: false, why: 'malformed' };
  const [, id, encoded] = match as unknown as [string, string, string];
  const key = keys.find((k) => k.id === id);
  if (!key) return { ok: false, why: 'unknown-key', keyId: id };
  const given = Buffer.from(encoded, 'base64url');
  const expected = mac(key, profile);
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) return { ok: false, why: 'mismatch', keyId: id };
  return { ok: true, keyId: id };
}
