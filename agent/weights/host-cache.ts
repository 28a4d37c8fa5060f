// The host's weights cache: one fetch per revision however many replicas ask for it at once,
// a budget (bytes or a share of the disk) kept by evicting the least recently used revision no
// shard uses, and the report of what the host holds. Agent side.
import { promises as fs, statfsSync } from 'node:fs';
import { isFetched, modelSourceOf } from '../../common/model-source.js';
import type { S3Client } from '@aws-sdk/client-s3';
import { s3ClientFromEnv } from '../../common/s3-store.js';
import { blobPath, cachedRevisionOf, repoDir, snapshotDir } from './cache-layout.js';
import { fetchS3Revision } from './s3-fetch.js';
import { fetchRevision } from './fetch-revision.js';
import type { FetchRevisionResult } from './revision-fetch.js';
import { hostHubEndpoint } from './hub-client.js';
import { listManifests, removeManifest, type Manifest } from './manifest.js';
import { FetchProgress, formatBytes } from './progress.js';
import { noSpace } from './errors.js';

/** `--weights-budget`: a size in bytes, or a share of the weights dir's filesystem. */
export type WeightsBudget = { bytes: number } | { percent: number };

export interface HostCacheOptions {
  weightsDir: string;
  budget?: WeightsBudget;
  /** The model sources of the shards this host runs now: their revisions are never evicted. */
  sourcesInUse(): string[];
  log(line: string, level?: 'warn'): void;
  /** Whose environment an S3 refusal tells to fix: "the agent on NODE". */
  who?: string;
}

export interface CachedRevision {
  repo: string;
  commit: string;
  bytes: number;
  lastUsedAt: number;
  inUse: boolean;
}

interface SharedFetch {
  progress: FetchProgress;
  done: Promise<FetchRevisionResult>;
  abort: AbortController;
  waiters: number;
}

export class HostWeightsCache {
  private readonly inFlight = new Map<string, SharedFetch>();
  private s3?: S3Client;

  constructor(readonly options: HostCacheOptions) {}

  /** The host's S3 client, from the agent's environment (AWS_*), made at the first S3 fetch. */
  private s3Client(): S3Client {
    return (this.s3 ??= s3ClientFromEnv());
  }

  get weightsDir(): string {
    return this.options.weightsDir;
  }

  /**
   * Makes the revision of `modelSource` complete here. Callers asking for a revision already
   * being fetched join that fetch (same progress, same result); when the last one leaves,
   * the fetch stops, keeping what it wrote for the next try to resume.
   */
  async ensure(
    modelSource: string,
    signal: AbortSignal,
    onProgress: (progress: FetchProgress) => void,
  ): Promise<FetchRevisionResult & { joined: boolean }> {
    const source = modelSourceOf(modelSource);
    const revision = isFetched(source) ? cachedRevisionOf(source) : undefined;
    if (!isFetched(source) || !revision) {
      throw new Error(`${modelSource} is not a pinned hub or S3 revision; the control worker pins sources at deploy`);
    }
    const key = `${revision.repo}@${revision.commit}`;
    let shared = this.inFlight.get(key);
    const joined = shared !== undefined;
    if (!shared) {
      const abort = new AbortController();
      const progress = new FetchProgress(revision.repo, revision.commit);
      const common = {
        weightsDir: this.weightsDir,
        progress,
        signal: abort.signal,
        reserve: (bytes: number) => this.reserve(bytes, key),
        log: (line: string) => this.options.log(line),
      };
      const done =
        source.kind === 's3'
          ? fetchS3Revision({ ...common, source, client: this.s3Client(), who: this.options.who ?? 'the agent' })
          : fetchRevision({ ...common, repo: revision.repo, commit: revision.commit, endpoint: hostHubEndpoint() });
      const created: SharedFetch = { progress, abort, waiters: 0, done: done.finally(() => this.inFlight.delete(key)) };
      shared = created;
      this.inFlight.set(key, created);
    }
    const current = shared;
    current.waiters++;
    const timer = setInterval(() => onProgress(current.progress), 1_000);
    onProgress(current.progress);
    const leave = (): void => {
      if (--current.waiters === 0) current.abort.abort(signal.reason);
    };
    try {
      const result = await new Promise<FetchRevisionResult>((resolve, reject) => {
        const onAbort = (): void => reject(signal.reason instanceof Error ? signal.reason : new Error('fetch cancelled'));
        if (signal.aborted) return onAbort();
        signal.addEventListener('abort', onAbort, { once: true });
        current.done.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
      });
      current.waiters--;
      return { ...result, joined };
    } catch (error) {
      if (signal.aborted) leave();
      else current.waiters--;
      throw error;
    } finally {
      clearInterval(timer);
    }
  }

  /** Whether a fetch of the revision is under way here. */
  fetching(repo: string, commit: string): boolean {
    return this.inFlight.has(`${repo}@${commit}`);
  }

  /** What the host holds, most recently used first. */
  list(): CachedRevision[] {
    const inUse = this.revisionsInUse();
    return listManifests(this.weightsDir)
      .map((m) => ({
        repo: m.repo,
        commit: m.commit,
        bytes: m.bytesTotal,
        lastUsedAt: m.lastUsedAt,
        inUse: inUse.has(`${m.repo}@${m.commit}`),
      }))
      .sort((a, b) => b.lastUsedAt - a.lastUsedAt);
  }

  private revisionsInUse(): Set<string> {
    const keys = new Set(this.inFlight.keys());
    for (const text of this.options.sourcesInUse()) {
      const source = modelSourceOf(text);
      const revision = isFetched(source) ? cachedRevisionOf(source) : undefined;
      if (revision) keys.add(`${revision.repo}@${revision.commit}`);
    }
    return keys;
  }

  /** Evicts least recently used revisions no shard uses until `bytes` more fit, or says why they cannot. */
  private async reserve(bytes: number, fetching: string): Promise<void> {
    const limit = this.limitBytes();
    for (;;) {
      const manifests = listManifests(this.weightsDir);
      const used = cacheBytes(manifests, fetching);
      const free = this.freeBytes();
      const overBudget = limit !== undefined && used + bytes > limit;
      const overDisk = bytes > free;
      if (!overBudget && !overDisk) return;
      const inUse = this.revisionsInUse();
      const victim = manifests.filter((m) => !inUse.has(`${m.repo}@${m.commit}`)).sort((a, b) => a.lastUsedAt - b.lastUsedAt)[0];
      if (!victim) {
        throw noSpace(
          overBudget
            ? `${formatBytes(bytes)} more would take the cache in ${this.weightsDir} to ${formatBytes(used + bytes)}, over its budget of ${formatBytes(limit!)}, and every revision it holds is in use`
            : `${formatBytes(bytes)} needed in ${this.weightsDir}, ${formatBytes(free)} free on its disk, and every revision it holds is in use`,
        );
      }
      this.options.log(
        `weights: evicting ${victim.repo}@${victim.commit.slice(0, 12)} (${formatBytes(victim.bytesTotal)}, least recently used, no shard uses it) to make room`,
      );
      await this.evict(victim, manifests);
    }
  }

  async evict(victim: Manifest, all: Manifest[] = listManifests(this.weightsDir)): Promise<void> {
    const keep = new Set(
      all.filter((m) => m !== victim && m.repo === victim.repo && m.commit !== victim.commit).flatMap((m) => m.files.map((f) => f.etag)),
    );
    removeManifest(this.weightsDir, victim.repo, victim.commit);
    await fs.rm(snapshotDir(this.weightsDir, victim.repo, victim.commit), { recursive: true, force: true });
    for (const file of victim.files) {
      if (!keep.has(file.etag)) await fs.rm(blobPath(this.weightsDir, victim.repo, file.etag), { force: true });
    }
    if (!all.some((m) => m !== victim && m.repo === victim.repo && m.commit !== victim.commit)) {
      await fs.rm(repoDir(this.weightsDir, victim.repo), { recursive: true, force: true });
    }
  }

  private limitBytes(): number | undefined {
    const budget = this.options.budget;
    if (!budget) return undefined;
    if ('bytes' in budget) return budget.bytes;
    const stat = statfsSync(this.weightsDir);
    return Math.floor((stat.blocks * stat.bsize * budget.percent) / 100);
  }

  private freeBytes(): number {
    const stat = statfsSync(this.weightsDir);
    return stat.bavail * stat.bsize;
  }
}

/** Bytes the cache holds: each blob once, the revision being fetched not yet counted. */
function cacheBytes(manifests: Manifest[], fetching: string): number {
  const seen = new Set<string>();
  let total = 0;
  for (const m of manifests) {
    if (`${m.repo}@${m.commit}` === fetching) continue;
    for (const f of m.files) {
      if (seen.has(`${m.repo}/${f.etag}`)) continue;
      seen.add(`${m.repo}/${f.etag}`);
      total += f.size;
    }
  }
  return total;
}
