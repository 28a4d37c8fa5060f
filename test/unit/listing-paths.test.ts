// The one check every weights listing passes (common/listing-paths.ts): which names are refused,
// why, and that a name is checked against the folders it will be written in.
import { mkdirSync, mkdtempSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { FailureType } from '../../common/failures.js';
import { checkCacheFolders, checkListing, isInside, listingPathProblem } from '../../common/listing-paths.js';

const ETAG = 'a'.repeat(64);
const dirs = { cache: '/cache', snapshot: '/cache/models--o--n/snapshots/c', blobs: '/cache/models--o--n/blobs' };

function refusalOf(entries: { path: string; etag?: string }[]): { type?: string; nonRetryable?: boolean; message: string } | undefined {
  try {
    checkListing('o/n@c', entries, 'Fix it.', dirs);
    return undefined;
  } catch (error) {
    return error as { type?: string; nonRetryable?: boolean; message: string };
  }
}

describe('the check of a weights listing', () => {
  it('takes the names of real model repositories', () => {
    for (const path of ['config.json', 'tokenizer/tokenizer.json', 'model-00001-of-00002.safetensors', '.gitattributes', 'a..b/c..d'])
      expect(listingPathProblem(path), path).toBeUndefined();
    expect(
      refusalOf([
        { path: 'config.json', etag: ETAG },
        { path: 'sub/x.bin', etag: `${'b'.repeat(32)}-3` },
      ]),
    ).toBeUndefined();
  });

  it('refuses names that climb, are absolute, or are not plain', () => {
    const cases: [string, RegExp][] = [
      ['../x', /".." segment/],
      ['a/../../x', /".." segment/],
      ['/etc/passwd', /absolute/],
      ['a//b', /empty segment/],
      ['a/', /empty segment/],
      ['', /empty/],
      ['./a', /"\." segment/],
      ['a\\..\\b', /backslash/],
      ['a\u0000b', /NUL/],
    ];
    for (const [path, why] of cases) {
      const refused = refusalOf([{ path, etag: ETAG }]);
      expect(refused, JSON.stringify(path)).toMatchObject({ type: FailureType.WeightsUnavailable, nonRetryable: true });
      expect(refused!.message, JSON.stringify(path)).toMatch(why);
      expect(refused!.message).toMatch(/^o\/n@c: its listing holds .* Fix it\.$/s);
    }
  });

  it('refuses a blob name that is a path, a name listed twice, and a file that is also a folder', () => {
    expect(refusalOf([{ path: 'x', etag: '../../../x' }])?.message).toMatch(/not a plain digest/);
    expect(
      refusalOf([
        { path: 'x', etag: ETAG },
        { path: 'x', etag: ETAG },
      ])?.message,
    ).toMatch(/listed twice/);
    expect(
      refusalOf([
        { path: 'a', etag: ETAG },
        { path: 'a/b', etag: ETAG },
      ])?.message,
    ).toMatch(/"a\/b", which sits under "a"/);
  });

  it('tells inside from outside after resolution', () => {
    expect(isInside('/cache/s', 'a/b')).toBe(true);
    expect(isInside('/cache/s', '/cache/s')).toBe(true);
    expect(isInside('/cache/s', '../s2/x')).toBe(false);
    expect(isInside('/cache/s', '/cache/s2')).toBe(false);
    expect(isInside('/cache/s', '..')).toBe(false);
  });

  it('refuses a folder of the cache that is a link leading out of it, and takes a cache reached through a link', () => {
    const root = mkdtempSync(join(tmpdir(), 'llmgw-listing-unit-'));
    const real = join(root, 'real-cache');
    mkdirSync(join(real, 'models--o--n'), { recursive: true });
    // The weights dir itself may be a link (a bigger disk mounted elsewhere).
    symlinkSync(real, join(root, 'cache'));
    const at = (cache: string) => ({ cache, snapshot: join(cache, 'models--o--n/snapshots/c'), blobs: join(cache, 'models--o--n/blobs') });
    expect(() => checkCacheFolders('o/n@c', at(join(root, 'cache')))).not.toThrow();
    mkdirSync(join(root, 'elsewhere'));
    symlinkSync(join(root, 'elsewhere'), join(real, 'models--o--n/blobs'));
    expect(() => checkCacheFolders('o/n@c', at(join(root, 'cache')))).toThrow(
      /models--o--n\/blobs", which is a folder of the cache that links out to .*elsewhere/,
    );
  });
});
