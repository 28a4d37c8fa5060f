// Summarises a V8 .cpuprofile (node --cpu-prof, or LLMGW_BENCH_CPU_PROF=DIR of the benches):
// share of samples by self function and by where the code lives (llmgw, node:internal, a
// dependency, native/GC/idle). Usage: node scripts/cpuprofile-top.mjs FILE [TOP]
import { readFileSync } from 'node:fs';

const [file, topArg] = process.argv.slice(2);
if (!file) {
  console.error('usage: node scripts/cpuprofile-top.mjs FILE.cpuprofile [TOP]');
  process.exit(2);
}
const top = Number(topArg ?? 25);
const profile = JSON.parse(readFileSync(file, 'utf8'));
const byId = new Map(profile.nodes.map((n) => [n.id, n]));
const counts = new Map();
for (const id of profile.samples) counts.set(id, (counts.get(id) ?? 0) + 1);

function placeOf(url, name) {
  if (name === '(idle)') return 'idle';
  if (name === '(garbage collector)') return 'GC';
  if (!url) return name.startsWith('(') ? name : 'native (no script)';
  if (url.startsWith('node:')) return 'node:internal';
  if (url.includes('/node_modules/'))
    return `dependency ${url
      .split('/node_modules/')
      .pop()
      .split('/')
      .slice(0, url.includes('/@') ? 2 : 1)
      .join('/')}`;
  if (url.includes('/dist/')) return 'llmgw';
  return 'other';
}

const bySelf = new Map();
const byPlace = new Map();
let total = 0;
let busy = 0;
for (const [id, n] of counts) {
  const node = byId.get(id);
  const { functionName, url, lineNumber } = node.callFrame;
  const name = functionName || '(anonymous)';
  const place = placeOf(url, name);
  total += n;
  if (place !== 'idle') busy += n;
  const key = `${name} ${url ? `${url.replace(/^.*\/(dist|node_modules)\//, '$1/')}:${lineNumber + 1}` : ''}`;
  bySelf.set(key, (bySelf.get(key) ?? 0) + n);
  byPlace.set(place, (byPlace.get(place) ?? 0) + n);
}
const pct = (n, of) => `${((100 * n) / of).toFixed(1).padStart(5)}%`;
console.log(`${file}: ${total} samples, ${pct(busy, total)} busy; shares below are of busy samples`);
console.log('\nby where the code lives');
for (const [place, n] of [...byPlace].filter(([p]) => p !== 'idle').sort((a, b) => b[1] - a[1])) console.log(`  ${pct(n, busy)}  ${place}`);
console.log(`\ntop ${top} functions by self time`);
for (const [key, n] of [...bySelf]
  .filter(([k]) => !k.startsWith('(idle)'))
  .sort((a, b) => b[1] - a[1])
  .slice(0, top)) {
  console.log(`  ${pct(n, busy)}  ${key}`);
}
