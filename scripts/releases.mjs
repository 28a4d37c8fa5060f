// The release table (releases.json) and the version in progress (package.json), read by the
// history checks, the recorder and the cross-release upgrade test. Plain Node, no build needed.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

export const root = new URL('..', import.meta.url).pathname;

/** Released versions, oldest first: `{ version, commit, date }`. */
export function releases() {
  return JSON.parse(readFileSync(join(root, 'releases.json'), 'utf8')).releases;
}

/** The version package.json names: the release in progress (never one already released). */
export function versionInProgress() {
  return JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')).version;
}

export function historiesDir(version) {
  return join(root, 'test', 'histories', version);
}
