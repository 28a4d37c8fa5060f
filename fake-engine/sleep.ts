// vLLM's sleep mode in the fake engine: POST /sleep?level=1|2, POST /wake_up[?tags=…] and
// GET /is_sleeping, served only with --enable-sleep-mode and VLLM_SERVER_DEV_MODE=1 as vLLM
// serves them. Asleep, the engine frees its simulated GPU memory (level 1 keeps the weights in
// host RAM); a wake takes --wake-seconds (level 2: plus the load time) and fails like CUDA's
// out-of-memory when the GPU's awake engines leave too little (common/sim-gpu-ledger.ts).
import type { IncomingMessage, ServerResponse } from 'node:http';
import { entries, gpuTotal, removeEntry, withLedgerLock, writeEntry, type LedgerEntry } from '../common/sim-gpu-ledger.js';
import type { FakeEngineOptions } from './options.js';
import { sendError, type ErrorType } from './requests.js';

type Tag = 'weights' | 'kv_cache';
const TAGS: readonly Tag[] = ['weights', 'kv_cache'];

/** What the engine allocates on one GPU: its pool (--gpu-memory-utilization of the GPU), weights first. */
interface GpuShare {
  gpu: number;
  totalMib: number;
  weightsMib: number;
  kvMib: number;
}

export class OutOfMemory extends Error {
  override name = 'OutOfMemoryError';
}

export class EngineSleep {
  /** Tags not on the GPU now; empty: awake. */
  private readonly asleep = new Set<Tag>();
  private level: 0 | 1 | 2 = 1;
  /** Level 0: paused, nothing freed. */
  private paused = false;
  private readonly waiters: (() => void)[] = [];
  private waking: Promise<void> | undefined;
  private readonly shares: GpuShare[];

  constructor(
    private readonly opts: FakeEngineOptions,
    private readonly log: (line: string) => void,
  ) {
    this.shares = shares(opts);
  }

  /** vLLM attaches these routes only in dev mode, and they work only with sleep mode enabled. */
  get served(): boolean {
    return this.opts.devMode === true;
  }

  get sleeping(): boolean {
    return this.paused || this.asleep.size > 0;
  }

  /** Resolves when the engine is awake: vLLM schedules nothing while it sleeps, so requests wait. */
  awake(): Promise<void> {
    if (!this.sleeping) return Promise.resolve();
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  /** Takes the engine's memory at start, as vLLM profiles and reserves it; throws OutOfMemory when it does not fit. */
  async allocateAtStart(): Promise<void> {
    await this.allocate(TAGS, true);
  }

  /**
   * A ledger the engine cannot use (unwritable, say) turns the accounting off rather than the
   * engine: the simulation is a convenience, serving is the engine's job.
   */
  private ledgerFailed(err: unknown): void {
    if (err instanceof OutOfMemory) throw err;
    this.log(`fake-engine: simulated GPU ledger not used: ${(err as Error).message}`);
    this.shares.length = 0;
  }

  /** Gives back what the ledger holds for this engine (a stop). */
  release(): void {
    const ledger = this.opts.simulatedGpus;
    if (ledger === undefined) return;
    try {
      for (const share of this.shares) removeEntry(ledger.ledgerDir, share.gpu, ledger.key);
    } catch (err) {
      this.log(`fake-engine: simulated GPU ledger not cleared: ${(err as Error).message}`);
    }
  }

  /** Serves the three routes; false for any other path. */
  route(path: string, req: IncomingMessage, res: ServerResponse): boolean {
    if (!this.served || (path !== '/sleep' && path !== '/wake_up' && path !== '/is_sleeping')) return false;
    req.resume();
    const refusal = this.refusal(path, req);
    if (refusal !== undefined) {
      sendError(res, refusal.type, refusal.message);
      return true;
    }
    const query = new URL(req.url ?? '/', 'http://engine').searchParams;
    if (path === '/is_sleeping') json(res, 200, { is_sleeping: this.sleeping });
    else if (path === '/sleep') {
      const level = Number(query.get('level') ?? '1') as 0 | 1 | 2;
      void this.sleep(level).then(() => json(res, 200, { status: 'sleeping', level }));
    } else {
      const tags = query.getAll('tags') as Tag[];
      this.wake(tags.length === 0 ? TAGS : tags).then(
        () => json(res, 200, { status: this.sleeping ? 'sleeping' : 'awake', tags_woken: tags.length === 0 ? null : tags }),
        (err: unknown) => sendError(res, 'InternalServerError', (err as Error).message),
      );
    }
    return true;
  }

  /** Why a call is refused, as vLLM v0.34.0 refuses it: level 0..2, mode abort|wait|keep, known tags. */
  private refusal(path: string, req: IncomingMessage): { type: ErrorType; message: string } | undefined {
    const query = new URL(req.url ?? '/', 'http://engine').searchParams;
    if (req.method !== (path === '/is_sleeping' ? 'GET' : 'POST')) return { type: 'MethodNotAllowedError', message: 'Method Not Allowed' };
    if (path === '/is_sleeping') return undefined;
    // vLLM's engine refuses to sleep when it was not started able to (its allocator is not CuMem).
    if (!this.opts.sleepMode)
      return { type: 'InternalServerError', message: 'Sleep mode is not enabled. Start the engine with --enable-sleep-mode.' };
    if (path === '/sleep') {
      const level = query.get('level') ?? '1';
      const mode = query.get('mode') ?? 'abort';
      if (!['0', '1', '2'].includes(level)) return { type: 'BadRequestError', message: `level must be 0, 1 or 2, got ${level}` };
      if (!['abort', 'wait', 'keep'].includes(mode))
        return { type: 'BadRequestError', message: `mode must be abort, wait or keep, got ${mode}` };
      return undefined;
    }
    const unknown = query.getAll('tags').filter((tag) => !TAGS.includes(tag as Tag));
    if (unknown.length > 0) return { type: 'BadRequestError', message: `unknown tags ${unknown.join(', ')} (weights, kv_cache)` };
    return undefined;
  }

  private async sleep(level: 0 | 1 | 2): Promise<void> {
    if (this.sleeping) return;
    this.level = level;
    if (level === 0) {
      this.paused = true;
      this.log('fake-engine: paused (level 0: nothing freed)');
      return;
    }
    for (const tag of TAGS) this.asleep.add(tag);
    await this.record();
    this.log(
      `fake-engine: asleep at level ${level} (${level === 1 ? 'weights in host RAM, KV cache freed' : 'weights and KV cache freed'})`,
    );
  }

  private async wake(tags: readonly Tag[]): Promise<void> {
    // One wake at a time, as the engine's own calls are one at a time.
    while (this.waking) await this.waking;
    this.paused = false;
    const wanted = tags.filter((tag) => this.asleep.has(tag));
    if (wanted.length === 0) {
      if (!this.sleeping) for (const resolve of this.waiters.splice(0)) resolve();
      return;
    }
    const started = Date.now();
    const run = (async () => {
      await this.allocate(wanted);
      // Level 2 dropped the weights: they are read again, as a load is.
      const seconds = this.opts.wakeSeconds + (this.level === 2 && wanted.includes('weights') ? this.opts.loadTimeS : 0);
      if (seconds > 0) await new Promise((resolve) => setTimeout(resolve, seconds * 1000));
      for (const tag of wanted) this.asleep.delete(tag);
      await this.record();
    })();
    this.waking = run;
    try {
      await run;
    } finally {
      this.waking = undefined;
    }
    this.log(`fake-engine: woke ${wanted.join(', ')} in ${Date.now() - started} ms`);
    if (!this.sleeping) for (const resolve of this.waiters.splice(0)) resolve();
  }

  /** Reserves `tags` on every GPU, or throws OutOfMemory naming the first that cannot hold them. */
  private async allocate(tags: readonly Tag[], atStart = false): Promise<void> {
    const ledger = this.opts.simulatedGpus;
    if (ledger === undefined || this.shares.length === 0) return;
    await withLedgerLock(ledger.ledgerDir, () => {
      this.reserve(ledger, tags, atStart);
    }).catch((err: unknown) => this.ledgerFailed(err));
  }

  /** Checks every GPU has room for `tags`, then records them held (inside the ledger's lock). */
  private reserve(ledger: NonNullable<FakeEngineOptions['simulatedGpus']>, tags: readonly Tag[], atStart: boolean): void {
    const needOf = (share: GpuShare) => tags.reduce((sum, tag) => sum + (tag === 'weights' ? share.weightsMib : share.kvMib), 0);
    for (const share of this.shares) {
      const others = [...entries(ledger.ledgerDir, share.gpu)].filter(([key]) => key !== ledger.key).map(([, entry]) => entry);
      const base = gpuTotal(ledger.ledgerDir, share.gpu)?.baseUsedMib ?? 0;
      const held = atStart ? 0 : this.gpuMib(share);
      const free = share.totalMib - base - others.reduce((sum, entry) => sum + entry.gpuMib, 0) - held;
      if (needOf(share) > free) {
        throw new OutOfMemory(
          `CUDA out of memory. Tried to allocate ${needOf(share)} MiB. GPU ${share.gpu} has a total capacity of ${share.totalMib} MiB of which ${Math.max(0, free)} MiB is free.`,
        );
      }
    }
    for (const share of this.shares) {
      const entry = this.entry(share);
      entry.gpuMib = (atStart ? 0 : this.gpuMib(share)) + needOf(share);
      if (tags.includes('weights')) entry.hostMib = 0;
      writeEntry(ledger.ledgerDir, share.gpu, ledger.key, entry);
    }
  }

  /** Writes what the engine holds now to the ledger. */
  private async record(): Promise<void> {
    const ledger = this.opts.simulatedGpus;
    if (ledger === undefined || this.shares.length === 0) return;
    await withLedgerLock(ledger.ledgerDir, () => {
      for (const share of this.shares) writeEntry(ledger.ledgerDir, share.gpu, ledger.key, this.entry(share));
    }).catch((err: unknown) => this.ledgerFailed(err));
  }

  private gpuMib(share: GpuShare): number {
    return (this.asleep.has('weights') ? 0 : share.weightsMib) + (this.asleep.has('kv_cache') ? 0 : share.kvMib);
  }

  private entry(share: GpuShare): LedgerEntry {
    return {
      pid: this.opts.simulatedGpus?.pid ?? process.pid,
      gpuMib: this.gpuMib(share),
      // Level 1 keeps a copy of the weights in host RAM while they are off the GPU.
      hostMib: this.asleep.has('weights') && this.level === 1 ? share.weightsMib : 0,
      sleeping: this.sleeping,
    };
  }
}

function shares(opts: FakeEngineOptions): GpuShare[] {
  const ledger = opts.simulatedGpus;
  if (ledger === undefined) return [];
  return ledger.gpus.flatMap((gpu) => {
    const total = gpuTotal(ledger.ledgerDir, gpu);
    if (total === undefined) return [];
    const pool = Math.round(total.totalMib * opts.gpuMemoryUtilization);
    const weightsMib = Math.min(pool, opts.weightsMib ?? Math.round(pool / 2));
    return [{ gpu, totalMib: total.totalMib, weightsMib, kvMib: pool - weightsMib }];
  });
}

function json(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}
