// `npm run record:histories`: records the replay histories of the release in progress anew
// (test/histories/<version>/, version from package.json) by running the tests that record them
// with LLMGW_RECORD_HISTORIES=1. Refuses for a released version: its folder is frozen.
import { execFileSync } from 'node:child_process';
import { mkdirSync, readdirSync, rmSync } from 'node:fs';
import { historiesDir, releases, root, versionInProgress } from './releases.mjs';

/** The test files that call recordHistory (test/helpers/histories.ts). */
const RECORDING_TESTS = [
  'test/e2e/contract.test.ts',
  'test/e2e/agent-node.test.ts',
  'test/e2e/agent-replaced.test.ts',
  'test/e2e/lifecycle.test.ts',
  'test/e2e/rollout.test.ts',
  'test/e2e/reconcile.test.ts',
  'test/e2e/router-routes.test.ts',
  'test/e2e/batch.test.ts',
];

const version = versionInProgress();
if (releases().some((r) => r.version === version)) {
  console.error(`${version} is released and its histories are frozen: set package.json's version to the next release first`);
  process.exit(1);
}
const dir = historiesDir(version);
rmSync(dir, { recursive: true, force: true });
mkdirSync(dir, { recursive: true });
const files = process.argv.slice(2).length ? process.argv.slice(2) : RECORDING_TESTS;
execFileSync('npm', ['run', '--silent', 'build'], { cwd: root, stdio: 'inherit' });
execFileSync('npx', ['vitest', 'run', ...files], { cwd: root, stdio: 'inherit', env: { ...process.env, LLMGW_RECORD_HISTORIES: '1' } });
const recorded = readdirSync(dir).filter((f) => f.endsWith('.json'));
console.log(
  `recorded ${recorded.length} histories into test/histories/${version}/: ${recorded.map((f) => f.replace(/\.json$/, '')).join(', ')}`,
);
