// Port helpers: a port picked at random never lands on one the caller reserved for another part,
// and the claims agents of one host use to agree on ports are their own (not in /tmp).
import { chmodSync, mkdirSync, mkdtempSync, rmSync, statSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { claimPort, defaultClaimsDir, ensureClaimsDir } from '../../agent/supervisor/start/ports.js';
import { findFreePortAvoiding, isPortFree } from '../../common/ports.js';

describe('findFreePortAvoiding', () => {
  it('returns a free port the reservation does not claim', async () => {
    for (let i = 0; i < 20; i++) {
      const port = await findFreePortAvoiding((p) => p % 2 === 0);
      expect(port % 2).toBe(1);
      expect(await isPortFree(port)).toBe(true);
    }
  });

  it('gives up, saying so, when every port it is offered is reserved', async () => {
    await expect(findFreePortAvoiding(() => true)).rejects.toThrow(/no free port outside the reserved ones after 50 tries/);
  });
});

describe('port claims', () => {
  const dirs: string[] = [];
  afterEach(() => {
    for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
  });
  const temp = (): string => {
    const dir = mkdtempSync(join(tmpdir(), 'llmgw-claims-'));
    dirs.push(dir);
    return dir;
  };

  it('keeps claims under the state dir, 0700, and lets only the first of two agents claim a port', () => {
    const dir = defaultClaimsDir(temp());
    ensureClaimsDir(dir);
    expect(statSync(dir).mode & 0o777).toBe(0o700);
    expect(claimPort(dir, 18123, 'a/demo.1.r0.a1')).toBe(true);
    expect(claimPort(dir, 18123, 'b/demo.2.r0.a1')).toBe(false);
    expect(statSync(join(dir, '18123')).mode & 0o777).toBe(0o600);
  });

  it('refuses a claims directory others can write, or one that is a link', () => {
    const open = join(temp(), 'open');
    mkdirSync(open, { mode: 0o777 });
    chmodSync(open, 0o777);
    expect(() => ensureClaimsDir(open)).toThrow(/is writable by others \(mode 777\)/);
    const link = join(temp(), 'link');
    symlinkSync(temp(), link);
    expect(() => ensureClaimsDir(link)).toThrow(/is not a directory \(a link\?\)/);
  });
});
