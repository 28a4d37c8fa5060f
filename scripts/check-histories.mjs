// CI check: replay histories are append-only. A history under test/histories/ that has
// landed is never edited, renamed or deleted, because it stands for workflows that are
// running in someone's fleet; re-recording it would hide exactly the break the replay
// test exists to catch. Every commit since the rule was introduced is checked (not only
// the last one), plus uncommitted changes, so a change spread over several commits is
// caught too.
import { execFileSync } from 'node:child_process';

/** The commit that introduced the rule; earlier commits re-recorded histories. */
const RULE_SINCE = '1bdc5a15c4bb1ab180e07bb7aa96558f580a91b0';

const root = new URL('..', import.meta.url).pathname;
const git = (...args) => execFileSync('git', args, { cwd: root, encoding: 'utf8' }).trim();

if (git('rev-parse', '--is-shallow-repository') === 'true') {
  console.log('check-histories: shallow clone, fetching the full history');
  git('fetch', '--unshallow', '--quiet');
}
try {
  git('cat-file', '-e', `${RULE_SINCE}^{commit}`);
} catch {
  console.error(`check-histories: commit ${RULE_SINCE} is not in this clone's history; clone the full history of main`);
  process.exit(1);
}

const problems = [];
const log = git('log', '--format=commit %h %s', '--diff-filter=MDRT', '--name-status', `${RULE_SINCE}..HEAD`, '--', 'test/histories');
let commit = '';
for (const line of log.split('\n').filter(Boolean)) {
  if (line.startsWith('commit ')) commit = line.slice(7);
  else problems.push(`${commit}: ${line.replace(/\t/g, ' ')}`);
}
for (const line of git('diff', '--name-status', '--diff-filter=MDRT', 'HEAD', '--', 'test/histories').split('\n').filter(Boolean)) {
  problems.push(`uncommitted: ${line.replace(/\t/g, ' ')}`);
}
if (problems.length) {
  console.error('Replay histories are append-only, but these changes edit, rename or delete one:');
  for (const problem of problems) console.error(`  ${problem}`);
  console.error('Restore the recorded file and record the new behaviour under a new name (test/helpers/histories.ts).');
  process.exit(1);
}
console.log('check-histories: every recorded history is unchanged since it landed');
