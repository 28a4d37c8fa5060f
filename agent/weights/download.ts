// One file's download into `<blob>.incomplete`: the bytes an earlier try left there are hashed
// first, the rest is asked for with a range request, and each chunk is hashed and written as it
// arrives. The caller verifies the digest and renames. Runs on a download thread
// (download-threads.ts), or in the calling thread where none can be started. Agent side; the
// hot path of a fetch.
import { createHash, type Hash } from 'node:crypto';
import { closeSync, openSync, readSync, statSync, writeSync } from 'node:fs';
import { finished, type Readable } from 'node:stream';
import { getFrom } from './http-get.js';

/** How a file's name is its digest: the LFS sha256 of its bytes, or git's blob id (sha1 over "blob <size>\0" and the bytes). */
export type DigestKind = 'sha256' | 'git-blob';

export interface DownloadJob {
  /** An http(s) URL of the file's bytes. */
  url: string;
  /** The Authorization header for `url`'s origin (never sent where it redirects). */
  authorization?: string;
  /** Where the bytes go: `<blob>.incomplete`. */
  partial: string;
  /** Bytes of `partial` kept from an earlier try, at most `size`. */
  offset: number;
  size: number;
  digest: DigestKind;
}

export interface DownloadResult {
  /** The size of `partial` now. */
  size: number;
  /** The hex digest of all of `partial`, by `digest`. */
  digest: string;
}

export interface DownloadEvents {
  /** Bytes received and written. */
  bytes(count: number): void;
  /** The server ignored the range: the `kept` bytes are fetched again. */
  restarted(kept: number): void;
}

export function newHash(kind: DigestKind, size: number): Hash {
  if (kind === 'sha256') return createHash('sha256');
  return createHash('sha1').update(`blob ${size}\0`);
}

export async function downloadToFile(job: DownloadJob, events: DownloadEvents, signal: AbortSignal): Promise<DownloadResult> {
  let hash = newHash(job.digest, job.size);
  if (job.offset > 0) hashPrefix(job.partial, job.offset, hash);
  if (job.offset < job.size) {
    const { from, body } = await getFrom(job.url, job.authorization, job.offset, signal);
    if (from === 0 && job.offset > 0) {
      hash = newHash(job.digest, job.size);
      events.restarted(job.offset);
    }
    const fd = openSync(job.partial, from > 0 ? 'a' : 'w');
    try {
      await writeBody(body, fd, hash, events, signal);
    } finally {
      closeSync(fd);
    }
  }
  return { size: statSync(job.partial).size, digest: hash.digest('hex') };
}

/** The first `length` bytes of `path` into `hash`. */
function hashPrefix(path: string, length: number, hash: Hash): void {
  const fd = openSync(path, 'r');
  try {
    const buffer = Buffer.allocUnsafe(1 << 20);
    for (let at = 0; at < length;) {
      const read = readSync(fd, buffer, 0, Math.min(buffer.length, length - at), at);
      if (read === 0) throw new Error(`${path} is shorter than the ${length} bytes kept from an earlier try`);
      hash.update(buffer.subarray(0, read));
      at += read;
    }
  } finally {
    closeSync(fd);
  }
}

/**
 * Each chunk hashed and written before the next is read, with a plain write(2) from the thread
 * that received it, as curl does: while it is still in the CPU's cache, with no hand-off. On a
 * download thread that blocks nobody. Measured here (500 MB, 4 files at a time, a 2-core VM):
 * writes through libuv's thread pool cost a cross-CPU wake-up per chunk, and 4 MB gathered
 * before each write tripled the kernel's time copying into the page cache; this costs 0.8-0.95
 * CPU-seconds where those cost 1.3-1.7.
 */
function writeBody(body: Readable, fd: number, hash: Hash, events: DownloadEvents, signal: AbortSignal): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    let settled = false;
    const settle = (error?: unknown): void => {
      if (settled) return;
      settled = true;
      body.off('data', onData);
      signal.removeEventListener('abort', onAbort);
      stopWatching();
      if (error === undefined) resolve();
      else {
        body.destroy();
        reject(error);
      }
    };
    const onData = (chunk: Buffer): void => {
      try {
        hash.update(chunk);
        writeFully(fd, chunk);
        events.bytes(chunk.length);
      } catch (error) {
        settle(error);
      }
    };
    const onAbort = (): void => settle(signal.reason ?? new Error('aborted'));
    if (signal.aborted) {
      body.destroy();
      reject(signal.reason ?? new Error('aborted'));
      return;
    }
    signal.addEventListener('abort', onAbort, { once: true });
    body.on('data', onData);
    const stopWatching = finished(body, (error) => settle(error ?? undefined));
  });
}

function writeFully(fd: number, chunk: Buffer): void {
  for (let at = 0; at < chunk.length;) at += writeSync(fd, chunk, at, chunk.length - at);
}
