// A deployment's revision: a short digest of what its engines run (engine, launcher, model
// source, args, env names and references, parallelism, GPU class, served name, startup
// timeout). Two snapshots with the same digest start identical engines; a catalog edit to any
// of these is a new revision. Pure (no Node built-ins), so workflows and activities both use it.
import type { ProfileSnapshot } from './replica-types.js';

/** The fields that decide what an engine is; the catalog's profile name is only a label. */
function canonical(snapshot: ProfileSnapshot): string {
  const env = Object.keys(snapshot.env)
    .sort()
    .map((key) => [key, snapshot.env[key]]);
  return JSON.stringify([
    snapshot.model,
    snapshot.modelSource,
    snapshot.servedName,
    snapshot.engine,
    snapshot.launcher,
    snapshot.gpuClass,
    snapshot.tensorParallel,
    snapshot.pipelineParallel,
    snapshot.gpusPerNode,
    snapshot.nodes,
    snapshot.args,
    env,
    snapshot.startupTimeoutSeconds,
    snapshot.minGpuMemoryMib,
  ]);
}

/** FNV-1a, twice with different offsets: 16 hex digits, stable across processes and builds. */
function digest(text: string): string {
  let a = 0x811c9dc5;
  let b = 0x01000193 ^ 0x5bd1e995;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    a = Math.imul(a ^ c, 0x01000193) >>> 0;
    b = Math.imul(b ^ c, 0x01000193) >>> 0;
    b = (b ^ (a >>> 7)) >>> 0;
  }
  return a.toString(16).padStart(8, '0') + b.toString(16).padStart(8, '0');
}

export function revisionOf(snapshot: ProfileSnapshot): string {
  return `r-${digest(canonical(snapshot)).slice(0, 10)}`;
}

/** The snapshot's revision, computing it for snapshots taken before revisions existed. */
export function revisionOfSnapshot(snapshot: ProfileSnapshot): string {
  return snapshot.revision ?? revisionOf(snapshot);
}
