// The catalog key of a test run: one file (0600) per test process, given to every worker and
// agent the harness starts (LLMGW_CATALOG_KEY_FILE), and used to sign the StartShards tests
// hand to agents directly, as the control worker signs what it resolves from the catalog.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ensureCatalogKeyFile, readCatalogKeys } from '../../common/catalog-key.js';
import { signRevision } from '../../common/revision-signature.js';
import type { EngineProfile } from '../../proto/gen/llmgw/v1/shard_pb.js';

let file: string | undefined;

export function testCatalogKeyFile(): string {
  if (file === undefined) {
    file = join(mkdtempSync(join(tmpdir(), 'llmgw-key-')), 'catalog.key');
    ensureCatalogKeyFile(file);
  }
  return file;
}

/** Signs `profile` in place with the test key, and returns it. */
export function signWithTestKey(profile: EngineProfile): EngineProfile {
  profile.signature = '';
  profile.signature = signRevision(profile, readCatalogKeys(testCatalogKeyFile()));
  return profile;
}
