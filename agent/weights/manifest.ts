// llmgw's record of one cached revision: its files and digests as the hub listed them, which
// blobs were verified (size and mtime then), its size and when a replica last used it.
// Written atomically beside the HF layout, in <weights dir>/.llmgw/manifests. Agent side.
import { mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { z } from 'zod';
import { blobNameProblem, listingPathProblem } from '../../common/listing-paths.js';
import { manifestPath, manifestsDir } from './cache-layout.js';

const ManifestSchema = z.object({
  repo: z.string(),
  commit: z.string(),
  files: z.array(
    z.object({
      path: z.string(),
      size: z.number(),
      etag: z.string(),
      sha256: z.string().optional(),
      // S3 multipart objects: the size of every part but the last, which their ETag is computed over.
      partSize: z.number().optional(),
      // S3 objects of a revision found again among a versioned bucket's versions: fetched by this id.
      versionId: z.string().optional(),
    }),
  ),
  verified: z.record(z.string(), z.object({ size: z.number(), mtimeMs: z.number() })),
  lastUsedAt: z.number(),
  bytesTotal: z.number(),
});

export type Manifest = z.infer<typeof ManifestSchema>;

export function readManifest(weightsDir: string, repo: string, commit: string): Manifest | undefined {
  return parse(manifestPath(weightsDir, repo, commit));
}

function parse(path: string): Manifest | undefined {
  try {
    const parsed = ManifestSchema.safeParse(JSON.parse(readFileSync(path, 'utf8')));
    if (!parsed.success) return undefined;
    // A record whose names leave the cache (written before listings were checked, or by hand)
    // is no record: eviction and removal delete by these names, and a fetch lists afresh.
    const bad = parsed.data.files.some((f) => listingPathProblem(f.path) !== undefined || blobNameProblem(f.etag) !== undefined);
    return bad ? undefined : parsed.data;
  } catch {
    return undefined;
  }
}

export function writeManifest(weightsDir: string, manifest: Manifest): void {
  const path = manifestPath(weightsDir, manifest.repo, manifest.commit);
  mkdirSync(dirname(path), { recursive: true });
  const aside = `${path}.${process.pid}.tmp`;
  writeFileSync(aside, JSON.stringify(manifest));
  renameSync(aside, path);
}

export function removeManifest(weightsDir: string, repo: string, commit: string): void {
  rmSync(manifestPath(weightsDir, repo, commit), { force: true });
}

/** Every revision the cache has a record of. */
export function listManifests(weightsDir: string): Manifest[] {
  let names: string[];
  try {
    names = readdirSync(manifestsDir(weightsDir));
  } catch {
    return [];
  }
  return names.filter((n) => n.endsWith('.json')).flatMap((n) => parse(join(manifestsDir(weightsDir), n)) ?? []);
}
