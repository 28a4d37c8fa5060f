// A key taken out of the control worker's key file is noticed (workers/key-file-watch.ts), however
// the file is changed, and a replica placed with it is judged revoked (activities/revoked-replicas.ts).
import { mkdtempSync, renameSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { newKeyPairLines, parseKeyLine, readCatalogKeys } from '../../common/catalog-key.js';
import { signPlacementTicket } from '../../common/placement-ticket.js';
import { demoTicket } from '../helpers/tickets.js';
import { ticketKeyGone } from '../../activities/revoked-replicas.js';
import { watchKeyFileRemovals } from '../../workers/key-file-watch.js';

const A = newKeyPairLines();
const B = newKeyPairLines();
const idOf = (line: string): string => parseKeyLine(line, 'a test key').id;

function keyFile(...lines: string[]): string {
  const file = join(mkdtempSync(join(tmpdir(), 'llmgw-key-watch-')), 'catalog.key');
  writeFileSync(file, `${lines.join('\n')}\n`, { mode: 0o600 });
  return file;
}

/** Rewrites `file` so that its stamp surely changes (size and inode), as an edit or a rename does. */
function replace(file: string, text: string): void {
  writeFileSync(`${file}.new`, text, { mode: 0o600 });
  renameSync(`${file}.new`, file);
}

describe('the key file watch', () => {
  it('names a key removed by an edit, once', () => {
    const file = keyFile(A.privateLine, B.privateLine);
    const watch = watchKeyFileRemovals(file, () => undefined);
    expect(watch.removed()).toEqual([]);
    writeFileSync(file, `${A.privateLine}\n# ${'x'.repeat(10)}\n`);
    expect(watch.removed()).toEqual([idOf(B.privateLine)]);
    expect(watch.removed()).toEqual([]);
  });

  it('names nothing when keys are only added or reordered', () => {
    const file = keyFile(B.privateLine);
    const watch = watchKeyFileRemovals(file, () => undefined);
    replace(file, `${A.privateLine}\n${B.privateLine}\n`);
    expect(watch.removed()).toEqual([]);
    replace(file, `${B.privateLine}\n${A.privateLine}\n`);
    expect(watch.removed()).toEqual([]);
  });

  it('compares a file fixed after a broken edit with the last keys it read', () => {
    const file = keyFile(A.privateLine, B.privateLine);
    const lines: string[] = [];
    const watch = watchKeyFileRemovals(file, (line) => lines.push(line));
    replace(file, 'too short\n');
    expect(watch.removed()).toEqual([]);
    expect(lines.join('\n')).toMatch(/changed but cannot be read/);
    expect(lines.join('\n')).not.toContain(A.privateLine.slice(16));
    replace(file, `${A.privateLine}\n`);
    expect(watch.removed()).toEqual([idOf(B.privateLine)]);
  });
});

describe('a ticket placed with a removed key', () => {
  const ticket = demoTicket();
  const byB = signPlacementTicket(ticket, readCatalogKeys(keyFile(B.privateLine)));

  it('is revoked once its key left the file, and only then', () => {
    expect(ticketKeyGone(byB, readCatalogKeys(keyFile(A.privateLine)).all)).toBe(
      `it was placed with key ${idOf(B.privateLine)}, which is no longer in the control worker's key file`,
    );
    expect(ticketKeyGone(byB, readCatalogKeys(keyFile(A.privateLine, B.publicLine)).all)).toBeUndefined();
    // No ticket (0.2.0) or a malformed one: left to its next renewal.
    expect(ticketKeyGone('', readCatalogKeys(keyFile(A.privateLine)).all)).toBeUndefined();
    expect(ticketKeyGone('garbage', readCatalogKeys(keyFile(A.privateLine)).all)).toBeUndefined();
  });
});
