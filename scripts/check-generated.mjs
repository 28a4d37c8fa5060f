// CI check: the committed protobuf-es code in proto/gen must be exactly what
// `npm run generate` writes from proto/, and `buf lint` must pass. Generates into a
// temporary folder and compares file by file, so nothing in the checkout changes.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';

const root = new URL('..', import.meta.url).pathname;
const buf = join(root, 'node_modules/.bin/buf');
execFileSync(buf, ['lint'], { cwd: root, stdio: 'inherit' });

const out = mkdtempSync(join(tmpdir(), 'llmgw-gen-'));
try {
  execFileSync(buf, ['generate', '--output', out], {
    cwd: root,
    stdio: 'inherit',
    env: { ...process.env, PATH: `${join(root, 'node_modules/.bin')}:${process.env.PATH}` },
  });
  const fresh = listFiles(join(out, 'proto/gen'));
  const committed = listFiles(join(root, 'proto/gen'));
  const problems = [];
  for (const file of new Set([...fresh.keys(), ...committed.keys()])) {
    if (!committed.has(file)) problems.push(`missing from proto/gen: ${file}`);
    else if (!fresh.has(file)) problems.push(`proto/gen/${file} is no longer generated from proto/`);
    else if (fresh.get(file) !== committed.get(file)) problems.push(`proto/gen/${file} is stale`);
  }
  if (problems.length) {
    console.error(problems.join('\n'));
    console.error('The generated code does not match proto/: run `npm run generate` and commit proto/gen.');
    process.exit(1);
  }
  console.log(`proto/gen is up to date (${committed.size} files); buf lint passed`);
} finally {
  rmSync(out, { recursive: true, force: true });
}

function listFiles(dir) {
  const files = new Map();
  const walk = (current) => {
    for (const name of readdirSync(current)) {
      const path = join(current, name);
      if (statSync(path).isDirectory()) walk(path);
      else files.set(relative(dir, path), readFileSync(path, 'utf8'));
    }
  };
  walk(dir);
  return files;
}
