// A pinned S3 revision found again in a versioned bucket after its objects were overwritten or
// deleted: the prefix as it stood at some moment, rebuilt from its versions, whose digest is the
// pinned one. The moments tried are those at which an object under the prefix changed, latest
// first; each object is then fetched by its version id. Agent side (the fetch); pure but for the
// listing.
import { ListObjectVersionsCommand, type S3Client } from '@aws-sdk/client-s3';
import { checkListing } from './listing-paths.js';
import { s3Digest, s3FolderPrefix, s3ListingFix, type S3Object } from './s3-store.js';

/** An object of a pinned revision, at the version that held it. */
export interface S3ObjectVersion extends S3Object {
  versionId: string;
}

/** One entry of the bucket's history of a key: a version, or a delete marker (no object). */
interface KeyChange {
  key: string;
  at: number;
  /** Undefined for a delete marker. */
  object?: S3ObjectVersion;
}

/**
 * The objects under `prefix` as they stood when their digest was `digest`, each with its version
 * id; undefined when no moment in the bucket's versions held that (an unversioned bucket, or
 * versions deleted since).
 */
export async function findPinnedVersions(
  client: S3Client,
  bucket: string,
  prefix: string,
  digest: string,
  signal?: AbortSignal,
): Promise<S3ObjectVersion[] | undefined> {
  const changes = await listKeyChanges(client, bucket, prefix, signal);
  const moments = [...new Set(changes.map((c) => c.at))].sort((a, b) => b - a);
  for (const moment of moments) {
    const objects = standingAt(changes, moment);
    if (objects.length > 0 && s3Digest(objects) === digest) {
      // The same check as the current listing's (listS3Objects): an old version's key is as
      // much the store owner's choice as a current one's.
      checkListing(`s3://${bucket}/${s3FolderPrefix(prefix)} (versions)`, objects, s3ListingFix(bucket));
      return objects;
    }
  }
  return undefined;
}

async function listKeyChanges(client: S3Client, bucket: string, prefix: string, signal?: AbortSignal): Promise<KeyChange[]> {
  const folder = s3FolderPrefix(prefix);
  const changes: KeyChange[] = [];
  // The SDK has no paginator for versions: key and version-id markers, a page at a time.
  let keyMarker: string | undefined;
  let versionMarker: string | undefined;
  for (let pages = 0; pages < MAX_PAGES; pages++) {
    const page = await client.send(
      new ListObjectVersionsCommand({ Bucket: bucket, Prefix: folder, KeyMarker: keyMarker, VersionIdMarker: versionMarker }),
      { abortSignal: signal },
    );
    for (const v of page.Versions ?? []) {
      if (!v.Key || v.Key.endsWith('/') || !v.VersionId) continue;
      const object = {
        path: v.Key.slice(folder.length),
        key: v.Key,
        size: v.Size ?? 0,
        etag: (v.ETag ?? '').replace(/"/g, ''),
        versionId: v.VersionId,
      };
      changes.push({ key: v.Key, at: v.LastModified?.getTime() ?? 0, object });
    }
    for (const marker of page.DeleteMarkers ?? []) {
      if (marker.Key) changes.push({ key: marker.Key, at: marker.LastModified?.getTime() ?? 0 });
    }
    if (!page.IsTruncated) return changes;
    keyMarker = page.NextKeyMarker;
    versionMarker = page.NextVersionIdMarker;
  }
  throw new Error(`s3://${bucket}/${folder}: more than ${MAX_PAGES * 1000} versions; its pinned revision is not looked for among them`);
}

/** 1,000 versions a page: a model's folder with a long history, not a bucket's. */
const MAX_PAGES = 100;

/** Each key's latest change at or before `moment` that is a version (not a delete marker), in path order. */
function standingAt(changes: KeyChange[], moment: number): S3ObjectVersion[] {
  const latest = new Map<string, KeyChange>();
  for (const change of changes) {
    if (change.at > moment) continue;
    const current = latest.get(change.key);
    // The store lists a key's versions newest first: on a tie, the first listed stands.
    if (!current || change.at > current.at) latest.set(change.key, change);
  }
  return [...latest.values()].flatMap((c) => (c.object ? [c.object] : [])).sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
}
