// The catalog key of a test run: one file (0600) made by the global setup, given to every
// worker and agent the harness starts (LLMGW_CATALOG_KEY_FILE), and used to sign the
// StartShards tests hand to agents directly, as the control worker signs what it resolves.
import { inject } from 'vitest';
import { readCatalogKeys } from '../../common/catalog-key.js';
import { signRevision } from '../../common/revision-signature.js';
import type { EngineProfile } from '../../proto/gen/llmgw/v1/shard_pb.js';

export function testCatalogKeyFile(): string {
  const file = inject('catalogKeyFile');
  if (!file) throw new Error('no catalog key: run tests through vitest (test/setup/global-setup.ts makes one)');
  return file;
}

/** Signs `profile` in place with the test key, and returns it. */
export function signWithTestKey(profile: EngineProfile): EngineProfile {
  profile.signature = '';
  profile.signature = signRevision(profile, readCatalogKeys(testCatalogKeyFile()));
  return profile;
}
