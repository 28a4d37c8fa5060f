// Which keys have left the control worker's catalog key file, for the catalog notifier: a key
// taken out of the file revokes every revision, ticket and route it signed, so the notifier
// withdraws and stops them at once, as for a catalog revocation. Control side, in the worker.
//
// The activities read the file on every use already, so what they sign and accept follows the
// file without help; this only notices that something they used to accept is gone. It is asked
// on the notifier's own tick (a stat every 5 s, as the catalog file is looked at), which also
// sees a file replaced by rename or a mounted secret's link swapped, where an fs.watch on the
// old inode would fall silent.
import { readCatalogKeys } from '../common/catalog-key.js';
import { stampOf } from '../catalog/watch.js';
import type { LineLog } from '../common/logger.js';

export interface KeyFileRemovals {
  /** The ids of keys the file held when last read and holds no longer; [] when none or unchanged. */
  removed(): string[];
}

/** Remembers the key ids `file` holds now; a file unreadable now starts from no key. */
export function watchKeyFileRemovals(file: string, log: LineLog): KeyFileRemovals {
  let seen = stampOf(file);
  let held = idsIn(file) ?? [];
  return {
    removed(): string[] {
      const stamp = stampOf(file);
      if (stamp === seen) return [];
      seen = stamp;
      let ring;
      try {
        ring = readCatalogKeys(file);
      } catch (error) {
        // Half-written, or missing for a moment while replaced: the next change is read again and
        // compared with the last keys read, so a key removed through a broken edit is not missed.
        log(`the catalog key file changed but cannot be read (${(error as Error).message}): nothing is signed until it can`, 'warn');
        return [];
      }
      const now = ring.all.map((k) => k.id);
      const gone = held.filter((id) => !now.includes(id));
      held = now;
      if (!ring.signing) log(`the catalog key file ${file} now holds no key that can sign: nothing is signed until it does`, 'warn');
      return gone;
    },
  };
}

function idsIn(file: string): string[] | undefined {
  try {
    return readCatalogKeys(file).all.map((k) => k.id);
  } catch {
    return undefined;
  }
}
