// What the router knows about the LoRA adapters on each engine, and the only code that talks
// to engines about them: reads /v1/models (what is loaded, as the engine says) and vLLM's
// `vllm:lora_requests_info` (how many slots it has), and calls load_lora_adapter /
// unload_lora_adapter. Router side; adapters/router.ts decides what to load where.
import type { Endpoint } from '../engines/endpoint.js';

/** One engine's adapters as this router sees them. */
export class EngineAdapters {
  /** Loaded on the engine: from its /v1/models, and from loads this router completed since. */
  readonly loaded = new Set<string>();
  /** Loads (and the unloads that make room for them) this router has under way there. */
  readonly pending = new Map<string, Promise<void>>();
  /** performance.now() of each adapter's last request sent there: the LRU order. */
  readonly lastUsed = new Map<string, number>();
  /** Requests in flight there, per adapter: an adapter in use is unloaded last. */
  readonly inflight = new Map<string, number>();
  /** Loads there run one after another, so that each makes room for itself against what the last left. */
  chain: Promise<void> = Promise.resolve();
  /** Bumped by every load and unload this router completes: a read begun before one is stale. */
  changes = 0;
  /** The engine's --max-loras, from its metrics; 0 until read. */
  slots = 0;
  /** Whether the last read of the engine succeeded: a failed one empties `loaded`. */
  reachable = false;

  constructor(readonly endpoint: Endpoint) {}

  free(): number {
    return this.slots - this.loaded.size - this.pending.size;
  }

  /** `work` after every load queued before it; its failure does not stop the ones after. */
  serially(work: () => Promise<void>): Promise<void> {
    const run = this.chain.then(work);
    this.chain = run.catch(() => undefined);
    return run;
  }

  busy(name: string): boolean {
    return (this.inflight.get(name) ?? 0) > 0;
  }

  /** The least recently used loaded adapter not being loaded, idle ones first; undefined when none. */
  victim(): string | undefined {
    let best: string | undefined;
    let bestKey = Infinity;
    for (const name of this.loaded) {
      if (this.pending.has(name)) continue;
      const busy = (this.inflight.get(name) ?? 0) > 0 ? 1e12 : 0;
      const key = busy + (this.lastUsed.get(name) ?? 0);
      if (key < bestKey) {
        bestKey = key;
        best = name;
      }
    }
    return best;
  }
}

const READ_TIMEOUT_MS = 1000;
const LOAD_TIMEOUT_MS = 120_000;

export class AdapterLoadError extends Error {
  override name = 'AdapterLoadError';
  constructor(
    message: string,
    /** The engine's HTTP status; 0 when it could not be reached. */
    readonly status: number,
  ) {
    super(message);
  }
}

async function call(e: Endpoint, method: 'GET' | 'POST', path: string, body: object | undefined, timeoutMs: number) {
  const res = await e.pool.request({
    method,
    path,
    // The engine's key on every call: vLLM guards /v1/models and the LoRA endpoints with it.
    headers: body === undefined ? e.auth.own : { ...e.auth.own, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
    headersTimeout: timeoutMs,
    bodyTimeout: timeoutMs,
  });
  return { status: res.statusCode, text: await res.body.text() };
}

/** Reads what the engine has loaded (and, once, its slots). Throws when it cannot be reached. */
export async function readEngineAdapters(view: EngineAdapters): Promise<void> {
  if (view.slots === 0) {
    const metrics = await call(view.endpoint, 'GET', '/metrics', undefined, READ_TIMEOUT_MS);
    const match = /vllm:lora_requests_info\{[^}]*max_lora="(\d+)"/.exec(metrics.text);
    if (match) view.slots = Number(match[1]);
  }
  const before = view.changes;
  const models = await call(view.endpoint, 'GET', '/v1/models', undefined, READ_TIMEOUT_MS);
  if (models.status !== 200) throw new Error(`/v1/models answered ${models.status}`);
  // A load or unload finished while the list was on its way: it may predate it; the next read will not.
  if (view.changes !== before) return;
  const data = (JSON.parse(models.text) as { data?: Array<{ id?: unknown; parent?: unknown }> }).data ?? [];
  const now = new Set(data.filter((m) => typeof m.parent === 'string' && typeof m.id === 'string').map((m) => m.id as string));
  for (const name of view.loaded) if (!now.has(name) && !view.pending.has(name)) view.loaded.delete(name);
  for (const name of now) view.loaded.add(name);
  view.reachable = true;
}

/** The engine's own words on a refused call: vLLM's `message` (either error shape) or its text. */
function reason(text: string): string {
  try {
    const body = JSON.parse(text) as { message?: unknown; error?: { message?: unknown } };
    const message = body.message ?? body.error?.message;
    if (typeof message === 'string') return message;
  } catch {
    // Not JSON: the text is the reason.
  }
  return text.slice(0, 500);
}

export async function loadAdapter(e: Endpoint, name: string, path: string): Promise<void> {
  let res;
  try {
    res = await call(e, 'POST', '/v1/load_lora_adapter', { lora_name: name, lora_path: path }, LOAD_TIMEOUT_MS);
  } catch (err) {
    throw new AdapterLoadError(`the engine could not be reached: ${(err as Error).message}`, 0);
  }
  // Loaded by someone else meanwhile (another router): what was wanted is true.
  if (res.status === 400 && /already been loaded/.test(res.text)) return;
  if (res.status !== 200) throw new AdapterLoadError(reason(res.text), res.status);
}

/** Unloads; an adapter the engine no longer has is as good as unloaded. */
export async function unloadAdapter(e: Endpoint, name: string): Promise<void> {
  const res = await call(e, 'POST', '/v1/unload_lora_adapter', { lora_name: name }, LOAD_TIMEOUT_MS);
  if (res.status !== 200 && res.status !== 404) throw new AdapterLoadError(reason(res.text), res.status);
}
