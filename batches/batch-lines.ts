// The pure parts of a batch: ids, the endpoints a batch may name, checking one input line,
// planning chunks, and the shape of an output or error line (OpenAI's). Safe to import from
// workflows (no I/O, no Node modules): the workflow, its activities and the router share them.

/** The endpoints a batch may run, as OpenAI's Batch API names them. */
export const BATCH_ENDPOINTS = ['/v1/chat/completions', '/v1/embeddings', '/v1/completions'] as const;
export type BatchEndpoint = (typeof BATCH_ENDPOINTS)[number];

export function isBatchEndpoint(endpoint: unknown): endpoint is BatchEndpoint {
  return typeof endpoint === 'string' && (BATCH_ENDPOINTS as readonly string[]).includes(endpoint);
}

const BATCH_ID = /^batch_[0-9a-f]{24}$/;

/** Whether `id` can name a batch (and so a workflow id the router may look up). */
export function isBatchId(id: string): boolean {
  return BATCH_ID.test(id);
}

/** The file ids a batch writes, derived from its id so that a retried step writes the same file. */
export function chunkFileId(batchId: string, chunk: number): string {
  return `file-${batchId.slice('batch_'.length)}chunk${chunk}`;
}
export function outputFileId(batchId: string): string {
  return `file-${batchId.slice('batch_'.length)}output`;
}
export function errorFileId(batchId: string): string {
  return `file-${batchId.slice('batch_'.length)}errors`;
}
/** The line index validation writes (batches/line-index.ts), so that a chunk reads only its own part of the input. */
export function indexFileId(batchId: string): string {
  return `file-${batchId.slice('batch_'.length)}index`;
}
/** What the router granted the batch (batches/batch-grant.ts): the activities act on it, not on the workflow's input. */
export function grantFileId(batchId: string): string {
  return `file-${batchId.slice('batch_'.length)}grant`;
}
/**
 * The owner recorded on a batch's chunk files, its line index and its grant: no API key's id looks like it,
 * so no key lists or reads them (they are the batch's scratch, removed when it finalizes).
 */
export function chunkOwner(batchId: string): string {
  return `${batchId}#chunks`;
}
export function isChunkOwner(owner: string): boolean {
  return /^batch_[0-9a-f]{24}#chunks$/.test(owner);
}

/** One request of a batch, as its input line holds it. */
export interface BatchRequest {
  /** 1-based line number in the input file. */
  line: number;
  customId: string;
  body: Record<string, unknown>;
}

/** Why a line is refused, or its request. `seen` collects custom_ids to refuse a repeat. */
export function checkLine(text: string, line: number, endpoint: BatchEndpoint, seen: Set<string>): BatchRequest | { error: string } {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return { error: 'is not valid JSON' };
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) return { error: 'is not a JSON object' };
  const o = parsed as Record<string, unknown>;
  const customId = o.custom_id;
  if (typeof customId !== 'string' || customId === '') return { error: 'has no custom_id (a non-empty string)' };
  if (customId.length > 512) return { error: 'has a custom_id longer than 512 characters' };
  if (seen.has(customId)) return { error: `repeats custom_id '${customId.slice(0, 64)}' (each must be unique)` };
  if (o.method !== 'POST') return { error: `has method ${JSON.stringify(o.method ?? null)}; only POST is supported` };
  if (o.url !== endpoint) return { error: `has url ${JSON.stringify(o.url ?? null)}; this batch's endpoint is ${endpoint}` };
  const body = o.body;
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return { error: 'has no body (a JSON object)' };
  const model = (body as Record<string, unknown>).model;
  if (typeof model !== 'string' || model === '') return { error: 'has no body.model' };
  if ((body as Record<string, unknown>).stream === true) return { error: 'has body.stream true; a batch line cannot stream' };
  seen.add(customId);
  return { line, customId, body: body as Record<string, unknown> };
}

/**
 * The models and adapters the key that created a batch may use (router/http/key-scope.ts, as
 * plain lists for a workflow's input); absent when the key may use every one.
 */
export interface BatchScope {
  models: string[] | 'all';
  adapters: string[] | 'all';
}

/**
 * Whether a line's `body.model` is one the batch's key may use, by the name the key's scope
 * gives it (a served name, a deployment name or an adapter's). The router checks the same key
 * against the pool behind a name, which can also allow a served name for a scoped deployment name:
 * a batch line must use the name the scope lists. A key allowed every adapter batches only the
 * names its models list (which other names are adapters, validation cannot tell).
 */
export function scopeAllows(scope: BatchScope | undefined, model: string): boolean {
  if (scope === undefined || scope.models === 'all') return true;
  return scope.models.includes(model) || (scope.adapters !== 'all' && scope.adapters.includes(model));
}

/** Whether a line holds nothing (blank lines, a trailing newline, are skipped and not counted). */
export function isBlankLine(text: string): boolean {
  return text.trim() === '';
}

/** One error of a batch's validation, in OpenAI's `errors.data` shape. */
export interface BatchLineError {
  code: string;
  message: string;
  line: number | null;
  param: string | null;
}

/** A chunk: the requests [start, end) of the batch, counted from 0 among non-blank lines. */
export interface ChunkPlan {
  index: number;
  start: number;
  end: number;
}

/** The chunks of a batch of `total` requests, `size` requests each (the last may be short). */
export function planChunks(total: number, size: number): ChunkPlan[] {
  if (!Number.isInteger(size) || size < 1) throw new Error(`a chunk must hold at least one request, not ${size}`);
  const out: ChunkPlan[] = [];
  for (let start = 0, index = 0; start < total; start += size, index++) out.push({ index, start, end: Math.min(total, start + size) });
  return out;
}

/** A line of the output file (or, with `error` set, of the error file), as OpenAI writes it. */
export interface ResultLine {
  id: string;
  custom_id: string;
  response: { status_code: number; request_id: string; body: unknown } | null;
  error: { code: string; message: string } | null;
}

/** `batch_req_` and 24 hex digits from a 12-byte random source (the activity's, not the workflow's). */
export function batchRequestId(random: Uint8Array): string {
  return `batch_req_${Array.from(random.subarray(0, 12), (b) => b.toString(16).padStart(2, '0')).join('')}`;
}

/** A request the engine answered 2xx: an output line. */
export function outputLine(id: string, customId: string, statusCode: number, requestId: string, body: unknown): ResultLine {
  return { id, custom_id: customId, response: { status_code: statusCode, request_id: requestId, body }, error: null };
}

/** A request that failed: an error line, with the response when there was one (a 4xx, a last 5xx). */
export function errorLine(
  id: string,
  customId: string,
  error: { code: string; message: string },
  response?: { statusCode: number; requestId: string; body: unknown },
): ResultLine {
  return {
    id,
    custom_id: customId,
    response: response ? { status_code: response.statusCode, request_id: response.requestId, body: response.body } : null,
    error,
  };
}

/** Why a batch stopped before running every request: the code its unrun lines carry in the error file. */
export type BatchStopReason = 'cancelled' | 'expired';

/** OpenAI's error for a request a stopped batch never ran (its guide's wording for `batch_expired`). */
const UNRUN: Record<BatchStopReason, { code: string; message: string }> = {
  expired: { code: 'batch_expired', message: 'This request could not be executed before the completion window expired.' },
  cancelled: { code: 'batch_cancelled', message: 'This request could not be executed before the batch was cancelled.' },
};

/** The error line of a request that a cancelled or expired batch never ran: no response, the reason as its error. */
export function unrunLine(id: string, customId: string, why: BatchStopReason): ResultLine {
  return errorLine(id, customId, UNRUN[why]);
}

/**
 * Which requests (0-based, among non-blank lines) a batch counted: those of its done chunks,
 * as `planChunks(total, size)` cut them. `counted(i)` answers in constant time.
 */
export function countedRequests(total: number, size: number, doneChunks: readonly number[]): (request: number) => boolean {
  const plan = planChunks(total, size);
  const done = new Set(doneChunks.filter((c) => plan[c] !== undefined));
  return (request) => request >= 0 && request < total && done.has(Math.floor(request / size));
}

/** Parses a duration OpenAI-style (`24h`) or shorter (`90m`, `30s`); undefined when malformed or over 24 h. */
export function parseCompletionWindow(text: unknown): number | undefined {
  if (typeof text !== 'string') return undefined;
  const m = /^(\d{1,6})([smh])$/.exec(text);
  if (!m) return undefined;
  const seconds = Number(m[1]) * { s: 1, m: 60, h: 3600 }[m[2] as 's' | 'm' | 'h'];
  return seconds >= 1 && seconds <= 24 * 3600 ? seconds : undefined;
}
