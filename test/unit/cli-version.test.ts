// `llmgw --version` answers without Temporal: the release from package.json and the build id
// a control worker of this install declares (LLMGW_BUILD_ID and LLMGW_DEPLOYMENT_NAME honoured,
// as the worker honours them). Runs the built CLI (npm run test:unit builds it first).
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const root = join(__dirname, '../..');
const release = (JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { version: string }).version;

async function llmgwVersion(env: Record<string, string>): Promise<string[]> {
  const { LLMGW_BUILD_ID: _id, LLMGW_DEPLOYMENT_NAME: _name, ...inherited } = process.env;
  const { stdout } = await promisify(execFile)(process.execPath, [join(root, 'bin/llmgw.js'), '--version'], {
    env: { ...inherited, ...env },
    timeout: 60_000,
  });
  return stdout.trim().split('\n');
}

describe('llmgw --version', () => {
  it('prints the release and the build id its control workers declare', async () => {
    const [own, overridden] = await Promise.all([
      llmgwVersion({}),
      llmgwVersion({ LLMGW_BUILD_ID: 'canary-7', LLMGW_DEPLOYMENT_NAME: 'llmgw-staging' }),
    ]);
    expect(own[0]).toBe(`llmgw ${release}`);
    // The package version, then a hash of the workflow bundle (workers/versioning.ts).
    expect(own[1]).toMatch(new RegExp(`^worker build id ${release.replace(/\./g, '\\.')}-[0-9a-f]{12} \\(Worker Deployment llmgw\\)$`));
    expect(overridden).toEqual([`llmgw ${release}`, 'worker build id canary-7 (Worker Deployment llmgw-staging)']);
  }, 90_000);
});
