// Which runs `llmgw upgrade` ends and lets reconciliation rebuild: builds older than the first release.
import { describe, expect, it } from 'vitest';
import { predates } from '../../common/build-version.js';

describe('predates', () => {
  it('compares the version a build id begins with to the first release', () => {
    expect(predates('0.1.0-4d9e6b8cfe8b', '0.2.0')).toBe(true);
    expect(predates('0.2.0-2aa417bc1140', '0.2.0')).toBe(false);
    expect(predates('0.3.0-dev-2aa417bc1140', '0.2.0')).toBe(false);
    expect(predates('0.10.0-2aa417bc1140', '0.9.1')).toBe(false);
    expect(predates('1.0.0-2aa417bc1140', '0.2.0')).toBe(false);
  });

  it('counts an unversioned run, or a build id with no version, as older', () => {
    expect(predates('unversioned', '0.2.0')).toBe(true);
    expect(predates('my-build', '0.2.0')).toBe(true);
  });
});
