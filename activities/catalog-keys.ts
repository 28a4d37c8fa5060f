// The catalog keys a control-side check verifies with, read again whenever the key file changes
// (its stamp: mtime, ctime, size, inode), so a key taken out of the file stops vouching for what
// it signed without a worker restart, and a key added is trusted at once.
import { stampOf } from '../catalog/watch.js';
import { readCatalogKeys, type CatalogKey } from '../common/catalog-key.js';

export function freshCatalogKeys(catalogKeyFile: string | undefined): () => CatalogKey[] {
  let keys: { stamp: string; all: CatalogKey[] } | undefined;
  return () => {
    if (catalogKeyFile === undefined) return [];
    const stamp = stampOf(catalogKeyFile);
    if (keys?.stamp !== stamp) keys = { stamp, all: readCatalogKeys(catalogKeyFile).all };
    return keys.all;
  };
}
