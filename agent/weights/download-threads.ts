// Download threads: the files of a fetch are received, hashed and written on worker threads
// (download.ts), so the agent's own event loop (its Temporal worker, its shards) never waits on
// a disk write, and a host with cores to spare hashes several files at once. One thread per 4
// cores: on a 2-core machine, one (two measured slower there: 500 MB in 1.9 s against 1.6 s,
// medians of 6). Agent side.
import { existsSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import { downloadToFile, type DownloadEvents, type DownloadJob, type DownloadResult } from './download.js';

/** Main thread → download thread. */
export type ToDownloadThread = { kind: 'start'; id: number; job: DownloadJob } | { kind: 'cancel'; id: number };

/** Download thread → main thread. */
export type FromDownloadThread =
  | { kind: 'bytes'; id: number; count: number }
  | { kind: 'restarted'; id: number; kept: number }
  | { kind: 'done'; id: number; result: DownloadResult }
  | { kind: 'failed'; id: number; error: SerializedError };

export interface SerializedError {
  message: string;
  name?: string;
  statusCode?: number;
  code?: string;
}

export function serializeError(error: unknown): SerializedError {
  const e = error as { message?: unknown; name?: unknown; statusCode?: unknown; code?: unknown } | undefined;
  return {
    message: typeof e?.message === 'string' ? e.message : String(error),
    ...(typeof e?.name === 'string' ? { name: e.name } : {}),
    ...(typeof e?.statusCode === 'number' ? { statusCode: e.statusCode } : {}),
    ...(typeof e?.code === 'string' ? { code: e.code } : {}),
  };
}

function deserializeError(error: SerializedError): Error {
  const { message, ...rest } = error;
  return Object.assign(new Error(message), rest);
}

/** Compiled next to this file; absent when running from TypeScript sources (vitest), where downloads run in the calling thread. */
const WORKER_FILE = join(__dirname, 'download-worker.js');

interface Running {
  events: DownloadEvents;
  resolve(result: DownloadResult): void;
  reject(error: unknown): void;
}

interface Thread {
  worker: Worker;
  running: Map<number, Running>;
}

export class DownloadThreads {
  private threads: Thread[] = [];
  private nextId = 1;
  private readonly useWorkers = existsSync(WORKER_FILE);

  /** One thread per 4 cores (at most 8): on a 2-core machine, one. */
  constructor(private readonly count = Math.min(8, Math.max(1, Math.floor(availableParallelism() / 4)))) {
    this.startThreads();
  }

  private startThreads(): void {
    if (this.useWorkers && this.threads.length === 0) this.threads = Array.from({ length: this.count }, () => this.start());
  }

  private start(): Thread {
    const thread: Thread = { worker: new Worker(WORKER_FILE), running: new Map() };
    // Only a thread with work keeps the process alive.
    thread.worker.unref();
    const finish = (id: number): Running | undefined => {
      const running = thread.running.get(id);
      thread.running.delete(id);
      if (thread.running.size === 0) thread.worker.unref();
      return running;
    };
    thread.worker.on('message', (message: FromDownloadThread) => {
      switch (message.kind) {
        case 'bytes':
          return thread.running.get(message.id)?.events.bytes(message.count);
        case 'restarted':
          return thread.running.get(message.id)?.events.restarted(message.kept);
        case 'done':
          return finish(message.id)?.resolve(message.result);
        case 'failed':
          return finish(message.id)?.reject(deserializeError(message.error));
      }
    });
    const lost = (error: unknown): void => {
      this.threads = this.threads.filter((t) => t !== thread);
      for (const running of thread.running.values()) running.reject(error);
      thread.running.clear();
    };
    thread.worker.on('error', lost);
    thread.worker.on('exit', (code) => lost(new Error(`a download thread exited (${code})`)));
    return thread;
  }

  /** Downloads on the least busy thread; an abort stops it, keeping what was written. */
  run(job: DownloadJob, events: DownloadEvents, signal: AbortSignal): Promise<DownloadResult> {
    if (!this.useWorkers) return downloadToFile(job, events, signal);
    signal.throwIfAborted();
    // Threads that died (their downloads failed with them) are replaced at the next download.
    this.startThreads();
    const thread = this.threads.reduce((a, b) => (b.running.size < a.running.size ? b : a));
    const id = this.nextId++;
    return new Promise<DownloadResult>((resolve, reject) => {
      const onAbort = (): void => thread.worker.postMessage({ kind: 'cancel', id } satisfies ToDownloadThread);
      signal.addEventListener('abort', onAbort, { once: true });
      const done = (): void => signal.removeEventListener('abort', onAbort);
      if (thread.running.size === 0) thread.worker.ref();
      thread.running.set(id, {
        events,
        resolve: (result) => {
          done();
          resolve(result);
        },
        // An abort's reason rather than what the thread made of it.
        reject: (error) => {
          done();
          reject(signal.aborted ? (signal.reason ?? error) : error);
        },
      });
      thread.worker.postMessage({ kind: 'start', id, job } satisfies ToDownloadThread);
    });
  }

  async close(): Promise<void> {
    const threads = this.threads;
    this.threads = [];
    await Promise.all(threads.map((t) => t.worker.terminate()));
  }
}

/** How long the shared threads outlive the last fetch that used them (a rollout fetches revisions one after another). */
const LINGER_MS = 30_000;

let shared: { threads: DownloadThreads; leases: number; linger?: NodeJS.Timeout } | undefined;

/**
 * The process's download threads, shared by every fetch under way: started by the first,
 * ended LINGER_MS after the last one returns its lease. Starting them is 80-150 ms here, so a
 * fetch takes its lease before listing the files, while they start.
 */
export function leaseDownloadThreads(): { threads: DownloadThreads; release(): void } {
  const current = (shared ??= { threads: new DownloadThreads(), leases: 0 });
  clearTimeout(current.linger);
  current.linger = undefined;
  current.leases++;
  let released = false;
  return {
    threads: current.threads,
    release() {
      if (released) return;
      released = true;
      if (--current.leases > 0) return;
      current.linger = setTimeout(() => {
        if (shared !== current || current.leases > 0) return;
        shared = undefined;
        void current.threads.close();
      }, LINGER_MS).unref();
    },
  };
}
