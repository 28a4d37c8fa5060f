// Signatures of the revisions the catalog allows: the control worker signs each profile it
// resolves from the catalog, and an agent starts a StartShard only when its profile's
// signature verifies (common/signature.ts). Process side; workflows only carry it along.
// The design, what it protects and what it does not, is in docs/security.md.
import { clone, toJson, type JsonValue } from '@bufbuild/protobuf';
import { EngineProfileSchema, type EngineProfile } from '../proto/gen/llmgw/v1/shard_pb.js';
import type { CatalogKey, CatalogKeyring } from './catalog-key.js';
import { engineProfileFromSnapshot } from './profile-conversion.js';
import { signStatement, verifyStatement, type SignatureVerdict } from './signature.js';
import type { ProfileSnapshot } from './replica-types.js';

// The domain of revision signatures (the legacy HMAC ones made before Ed25519 use it too).
const DOMAIN = 'llmgw revision v1';

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

/** The signature under the revision's domain with the keyring's signing key (Ed25519, or the legacy HMAC). */
export function signRevision(profile: EngineProfile, keyring: CatalogKeyring): string {
  return signStatement(DOMAIN, canonicalRevision(profile), keyring);
}

/** The snapshot with its signature: what resolveDeployment hands to the deployment. */
export function signSnapshot(snapshot: ProfileSnapshot, keyring: CatalogKeyring): ProfileSnapshot {
  const unsigned: ProfileSnapshot = { ...snapshot, signature: '' };
  return { ...snapshot, signature: signRevision(engineProfileFromSnapshot(unsigned), keyring) };
}

export type RevisionVerdict = SignatureVerdict;

export function verifyRevision(profile: EngineProfile, keys: CatalogKey[]): RevisionVerdict {
  return verifyStatement(DOMAIN, canonicalRevision(profile), profile.signature, keys);
}
