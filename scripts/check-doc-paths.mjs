// Checks that what README.md, CHANGELOG.md and docs/*.md name still exists in the code:
// backticked repository paths (`router/server.ts`), bare source file names (`place.ts`),
// llmgw's metric names, LLMGW_ variables, `llmgw <command>`s, npm scripts, flags, and links
// between docs and their #anchors (also those in code comments). Prints each one it cannot
// find; exits 1 if any. Run it after moving or renaming files: node scripts/check-doc-paths.mjs
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, normalize } from 'node:path';
import { fileURLToPath } from 'node:url';

// The repository root, wherever it is run from.
process.chdir(join(dirname(fileURLToPath(import.meta.url)), '..'));
const docs = ['README.md', 'CHANGELOG.md', ...git('ls-files', 'docs/*.md')];
const tracked = git('ls-files');
const trackedSet = new Set(tracked);
const trackedDirs = new Set(
  tracked.flatMap((file) =>
    file
      .split('/')
      .slice(0, -1)
      .map((_, i, parts) => parts.slice(0, i + 1).join('/')),
  ),
);
const topDirs = new Set([...trackedDirs].filter((dir) => !dir.includes('/')));
const basenames = new Set(tracked.map((file) => file.split('/').pop()));
const codeFiles = tracked.filter(
  (file) => /\.(ts|mjs|js|sh|json|yaml)$/.test(file) && !file.startsWith('docs/') && !file.startsWith('test/histories/'),
);
const code = codeFiles.map((file) => readFileSync(file, 'utf8')).join('\n');
const npmScripts = new Set(Object.keys(JSON.parse(readFileSync('package.json', 'utf8')).scripts));
const commands = new Set([...code.matchAll(/\.command\('([a-z][a-z-]*)'/g)].map((match) => match[1]));

// Flags of programs other than llmgw that the docs quote (vLLM, SGLang, llama.cpp, Ray, curl…).
const FOREIGN_FLAGS = new Set([
  '--trust-remote-code',
  '--max-cpu-loras',
  '--download-dir',
  '--system',
  '--no-create-home',
  '--head',
  '--address',
  '--block',
  '--ip',
  '--nnodes',
  '--node-rank',
  '--dist-init-addr',
  '--model-path',
  '--tp',
  '--max-loras-per-batch',
  '--api-key',
  '--cache-ram',
  '--parallel',
  '--no-repack',
  '--threads',
  '--alias',
  '--model',
  '--metrics',
  '--in-memory',
  '--type',
  '--task-queue',
  '--workflow-id',
  '--input',
  '--name',
  '--help',
  '--enable-force-include-usage',
  '--only-binary',
]);

const missing = [];
for (const doc of docs) {
  const text = readFileSync(doc, 'utf8');
  const lines = text.split('\n');
  let fenced = false;
  lines.forEach((line, index) => {
    const where = `${doc}:${index + 1}`;
    if (line.startsWith('```')) fenced = !fenced;
    else if (fenced && doc !== 'CHANGELOG.md') checkWords(line, where);
    // CHANGELOG.md tells of files that were, so only its links are checked.
    if (doc !== 'CHANGELOG.md') for (const [, token] of line.matchAll(/`([^`\n]+)`/g)) checkToken(token.trim(), where);
    for (const [, target] of line.matchAll(/\]\(([^)\s]+)\)/g)) checkLink(doc, target, where);
    for (const [, name] of line.matchAll(/npm run ([a-z][\w:-]*\w)(?![\w:*-])/g))
      if (!npmScripts.has(name)) missing.push(`${where}: npm script ${name}`);
    if (doc !== 'CHANGELOG.md')
      for (const [name] of line.matchAll(/\bLLMGW_[A-Z0-9_]+\b/g)) if (!code.includes(name)) missing.push(`${where}: variable ${name}`);
  });
}
// Code comments that point into the docs, e.g. "see docs/failures.md#a-host-cut-off-from-the-network".
for (const hit of gitLines('grep', '-n', '-o', '-E', 'docs/[a-z-]+\\.md(#[a-z0-9-]+)?', '--', ':!docs', ':!README.md', ':!CHANGELOG.md')) {
  const [file, line, target] = hit.split(':');
  checkLink('.', target, `${file}:${line}`);
}

for (const entry of missing) console.log(entry);
console.log(missing.length === 0 ? 'check-doc-paths: every name the docs mention exists' : `check-doc-paths: ${missing.length} missing`);
process.exitCode = missing.length === 0 ? 0 : 1;

function checkToken(token, where) {
  checkPath(token, where);
  checkWords(token, where);
}

function checkPath(token, where) {
  if (/[<>…*{}$ ]|:\/\//.test(token) || token.startsWith('~') || token.startsWith('.llmgw')) return;
  const path = token.replace(/[,.;:]$/, '').replace(/#.*$/, '');
  const first = path.split('/')[0];
  if (path.includes('/') && topDirs.has(first) && !path.startsWith('/')) {
    const bare = path.replace(/\/$/, '').replace(/:.*$/, '');
    if (!trackedSet.has(bare) && !trackedDirs.has(bare) && !existsSync(bare)) missing.push(`${where}: path ${bare}`);
    return;
  }
  if (/^[\w.-]+\.(ts|mjs|sh|md)$/.test(path) && !basenames.has(path)) missing.push(`${where}: file ${path} (no file of that name)`);
  const metric = /^(llmgw_[a-z0-9_]+?)(\*|_\*)?(\{.*)?$/.exec(path);
  if (metric && !code.includes(metric[1])) missing.push(`${where}: metric ${metric[1]}`);
}

/** `llmgw <command>`s and flags, in a backticked token or a line of a code block. */
function checkWords(text, where) {
  const command = /^\s*(?:npx )?llmgw ([a-z][a-z-]*)/.exec(text);
  if (command && !commands.has(command[1])) missing.push(`${where}: command llmgw ${command[1]}`);
  for (const [flag] of text.matchAll(/(?<![\w-])--[a-z][a-z0-9-]*/g)) {
    if (FOREIGN_FLAGS.has(flag) || code.includes(`'${flag}`) || code.includes(`${flag} `) || code.includes(`"${flag}`)) continue;
    // The benches parse their flags with parseArgs: the name without its dashes.
    if (code.includes(`'${flag.slice(2)}'`)) continue;
    // commander's --no-X negates --X.
    if (flag.startsWith('--no-') && code.includes(`'--${flag.slice(5)}`)) continue;
    missing.push(`${where}: flag ${flag}`);
  }
}

function checkLink(fromDoc, target, where) {
  if (/^[a-z]+:/.test(target) || (target.startsWith('#') && fromDoc === '.')) return;
  const [file, anchor] = target.split('#');
  const base = fromDoc === '.' ? '.' : dirname(fromDoc);
  const resolved = file === '' ? fromDoc : normalize(join(base, file));
  if (!file.endsWith('.md') && file !== '') {
    if (!existsSync(resolved)) missing.push(`${where}: link ${target}`);
    return;
  }
  if (!existsSync(resolved)) return void missing.push(`${where}: link ${target} (no such file)`);
  if (anchor && !anchorsOf(resolved).has(anchor)) missing.push(`${where}: link ${target} (no such heading)`);
}

/** GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens. */
function anchorsOf(file) {
  const anchors = new Set();
  let fenced = false;
  for (const line of readFileSync(file, 'utf8').split('\n')) {
    if (line.startsWith('```')) fenced = !fenced;
    const heading = !fenced && /^#{1,6} (.*)$/.exec(line);
    if (!heading) continue;
    let slug = heading[1]
      .toLowerCase()
      .replace(/[^\p{L}\p{N} _-]/gu, '')
      .replace(/ /g, '-');
    for (let n = 1; anchors.has(slug); n++) slug = `${slug.replace(/-\d+$/, '')}-${n}`;
    anchors.add(slug);
  }
  return anchors;
}

function git(...args) {
  return gitLines(...args);
}

function gitLines(...args) {
  try {
    return execFileSync('git', args, { encoding: 'utf8', maxBuffer: 64 << 20 })
      .split('\n')
      .filter(Boolean);
  } catch (error) {
    if (error.status === 1) return []; // git grep: nothing found
    throw error;
  }
}
