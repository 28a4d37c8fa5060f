#!/usr/bin/env node
// Prints the import depth of one source folder: the longest chain of imports
// among that folder's own files, and the chain itself. Run as
// `node scripts/import-depth.mjs router`. Type-only imports count too (a reader
// follows them just the same); an import that closes a cycle is named and not
// followed, so a cycle cannot hide depth.
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';

const args = process.argv.slice(2);
// --values: only imports that stay in the emitted JavaScript (no `import type`), the graph Node loads.
const valuesOnly = args.includes('--values');
const folder = resolve(args.find((arg) => !arg.startsWith('--')) ?? 'router');
const files = listTsFiles(folder);
const known = new Set(files);

const edges = new Map();
for (const file of files)
  edges.set(
    file,
    importsOf(file).filter((target) => known.has(target)),
  );

// Depth of a file = 1 + the deepest file it imports (a leaf is floor 1).
const depth = new Map();
const next = new Map();
const cycles = [];
function floorOf(file, onPath = new Set()) {
  if (depth.has(file)) return depth.get(file);
  onPath.add(file);
  let best = 0;
  for (const target of edges.get(file)) {
    if (onPath.has(target)) {
      cycles.push(`${relative(process.cwd(), file)} -> ${relative(process.cwd(), target)}`);
      continue;
    }
    const d = floorOf(target, onPath);
    if (d > best) {
      best = d;
      next.set(file, target);
    }
  }
  onPath.delete(file);
  depth.set(file, best + 1);
  return best + 1;
}

let top = files[0];
for (const file of files) if (floorOf(file) > floorOf(top)) top = file;
const arrows = [...edges.values()].reduce((sum, targets) => sum + targets.length, 0);
const chain = [];
for (let file = top; file; file = next.get(file)) chain.push(relative(process.cwd(), file));
console.log(`${relative(process.cwd(), folder)}: ${files.length} files, ${arrows} imports, depth ${depth.get(top)}`);
console.log(chain.join('\n  -> '));
for (const closing of cycles) console.log(`cycle closed by ${closing}`);

function listTsFiles(dir) {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return listTsFiles(path);
    return name.endsWith('.ts') && !name.endsWith('.d.ts') ? [path] : [];
  });
}

function importsOf(file) {
  const source = readFileSync(file, 'utf8');
  const specifiers = [...source.matchAll(/(?:^|\n)\s*(import|export)(\s+type\b)?[^;]*?\bfrom\s*["']([^"']+)["']/g)]
    .filter((match) => !(valuesOnly && match[2]))
    .map((match) => match[3]);
  for (const match of source.matchAll(/\bimport\(\s*["']([^"']+)["']\s*\)/g)) specifiers.push(match[1]);
  return specifiers
    .filter((specifier) => specifier.startsWith('.'))
    .map((specifier) => resolve(dirname(file), specifier.replace(/\.js$/, '.ts')));
}
