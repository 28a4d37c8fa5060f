// CI check: a released version's replay histories are frozen. test/histories/<version>/ of
// every release in releases.json must be exactly what it was at the release's commit (no file
// edited, added, renamed or deleted since, committed or not), and package.json must name a
// version not yet released: the release in progress, whose folder `npm run record:histories`
// records anew whenever the workflow code changes (docs/upgrades.md).
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { historiesDir, releases, root, versionInProgress } from './releases.mjs';

const git = (...args) => execFileSync('git', args, { cwd: root, encoding: 'utf8' }).trim();

if (git('rev-parse', '--is-shallow-repository') === 'true') {
  console.log('check-histories: shallow clone, fetching the full history');
  git('fetch', '--unshallow', '--quiet');
}

const problems = [];
const inProgress = versionInProgress();
for (const { version, commit } of releases()) {
  if (version === inProgress) problems.push(`package.json names ${version}, which is released: name the next version in progress`);
  try {
    git('cat-file', '-e', `${commit}^{commit}`);
  } catch {
    problems.push(`release ${version}: commit ${commit} is not in this clone's history; clone the full history of main`);
    continue;
  }
  const folder = `test/histories/${version}`;
  if (!git('ls-tree', '-r', '--name-only', commit, '--', folder)) problems.push(`release ${version}: ${folder} is empty at ${commit}`);
  // Against the working tree: catches committed and uncommitted changes alike.
  for (const line of git('diff', '--name-status', commit, '--', folder).split('\n').filter(Boolean)) {
    problems.push(`release ${version} is frozen, but: ${line.replace(/\t/g, ' ')}`);
  }
  for (const file of git('ls-files', '--others', '--exclude-standard', '--', folder).split('\n').filter(Boolean)) {
    problems.push(`release ${version} is frozen, but: untracked ${file}`);
  }
}
const current = historiesDir(inProgress);
if (!existsSync(current) || !readdirSync(current).some((f) => f.endsWith('.json'))) {
  problems.push(`test/histories/${inProgress}/ (the release in progress) has no histories: run npm run record:histories`);
}
if (problems.length) {
  console.error('Replay histories:');
  for (const problem of problems) console.error(`  ${problem}`);
  console.error('A released folder is never edited; record the release in progress with npm run record:histories.');
  process.exit(1);
}
console.log(`check-histories: ${releases().length} released folder(s) unchanged; ${inProgress} is in progress`);
