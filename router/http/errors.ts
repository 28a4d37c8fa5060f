// Errors the router answers, all in OpenAI's shape `{"error":{message,type,param,code}}`, and
// the conversion of an engine's own error bodies (either of vLLM's two shapes) into it.
// Router side: what a client's OpenAI SDK sees when something is refused or fails.
import type { ServerResponse } from 'node:http';
import { z } from 'zod';

export type RouterErrorKind =
  | 'invalid_json'
  | 'missing_model'
  | 'unknown_model'
  | 'no_replica'
  | 'body_too_large'
  | 'unauthorized'
  | 'unknown_path'
  | 'method_not_allowed'
  | 'upstream_unavailable'
  | 'upstream_failed'
  | 'rate_limited'
  | 'queue_full'
  | 'queue_timeout'
  | 'router_stopping'
  | 'router_busy'
  | 'invalid_path'
  | 'invalid_flow_header'
  | 'deadline_unmeetable'
  | 'deadline_missed'
  | 'invalid_multipart'
  | 'invalid_parameter'
  | 'missing_file'
  | 'missing_purpose'
  | 'invalid_purpose'
  | 'file_not_found'
  | 'file_too_large'
  | 'files_not_configured'
  | 'batch_not_found'
  | 'batches_not_configured'
  | 'internal';

interface ErrorShape {
  status: number;
  type: string;
  code: string;
  param: string | null;
}

function shapeOf(kind: RouterErrorKind): ErrorShape {
  switch (kind) {
    case 'invalid_json':
      return { status: 400, type: 'invalid_request_error', code: 'invalid_json', param: null };
    case 'missing_model':
      return { status: 400, type: 'invalid_request_error', code: 'missing_required_parameter', param: 'model' };
    case 'unknown_model':
      return { status: 404, type: 'invalid_request_error', code: 'model_not_found', param: 'model' };
    case 'no_replica':
      return { status: 503, type: 'service_unavailable_error', code: 'no_replica_ready', param: null };
    case 'body_too_large':
      return { status: 413, type: 'invalid_request_error', code: 'request_too_large', param: null };
    case 'unauthorized':
      return { status: 401, type: 'invalid_request_error', code: 'invalid_api_key', param: null };
    case 'unknown_path':
      return { status: 404, type: 'invalid_request_error', code: 'unknown_url', param: null };
    case 'method_not_allowed':
      return { status: 405, type: 'invalid_request_error', code: 'method_not_allowed', param: null };
    case 'upstream_unavailable':
      return { status: 503, type: 'service_unavailable_error', code: 'upstream_unavailable', param: null };
    case 'upstream_failed':
      return { status: 502, type: 'server_error', code: 'upstream_error', param: null };
    case 'rate_limited':
      // OpenAI's own 429: the type names what ran out (requests), the code is the one SDKs know.
      return { status: 429, type: 'requests', code: 'rate_limit_exceeded', param: null };
    case 'queue_full':
      // A 429 like a rate limit (the SDKs raise RateLimitError and back off), with its own code.
      return { status: 429, type: 'requests', code: 'queue_full', param: null };
    case 'queue_timeout':
      return { status: 503, type: 'service_unavailable_error', code: 'queue_timeout', param: null };
    case 'router_stopping':
      return { status: 503, type: 'service_unavailable_error', code: 'router_stopping', param: null };
    case 'router_busy':
      // The router's own memory, not the client's rate, ran out: a 503 to retry (here or elsewhere).
      return { status: 503, type: 'service_unavailable_error', code: 'router_busy', param: null };
    case 'invalid_path':
      return { status: 400, type: 'invalid_request_error', code: 'invalid_url', param: null };
    case 'invalid_flow_header':
      return { status: 400, type: 'invalid_request_error', code: 'invalid_header', param: null };
    case 'deadline_unmeetable':
      // Refused at once, before any wait: the SDKs' RateLimitError, which backs off and retries.
      return { status: 429, type: 'requests', code: 'deadline_unmeetable', param: null };
    case 'deadline_missed':
      return { status: 429, type: 'requests', code: 'deadline_missed', param: null };
    case 'invalid_multipart':
      return { status: 400, type: 'invalid_request_error', code: 'invalid_multipart', param: null };
    case 'invalid_parameter':
      return { status: 400, type: 'invalid_request_error', code: 'invalid_value', param: null };
    case 'missing_file':
      return { status: 400, type: 'invalid_request_error', code: 'missing_required_parameter', param: 'file' };
    case 'missing_purpose':
      return { status: 400, type: 'invalid_request_error', code: 'missing_required_parameter', param: 'purpose' };
    case 'invalid_purpose':
      return { status: 400, type: 'invalid_request_error', code: 'invalid_value', param: 'purpose' };
    case 'file_not_found':
      // What OpenAI answers for a file that does not exist or is another key's: they are not told apart.
      return { status: 404, type: 'invalid_request_error', code: 'file_not_found', param: 'id' };
    case 'file_too_large':
      return { status: 413, type: 'invalid_request_error', code: 'file_too_large', param: 'file' };
    case 'files_not_configured':
      return { status: 404, type: 'invalid_request_error', code: 'files_not_configured', param: null };
    case 'batch_not_found':
      // As for files: another key's batch is answered as one that does not exist.
      return { status: 404, type: 'invalid_request_error', code: 'batch_not_found', param: 'batch_id' };
    case 'batches_not_configured':
      return { status: 404, type: 'invalid_request_error', code: 'batches_not_configured', param: null };
    case 'internal':
      return { status: 500, type: 'server_error', code: 'internal_error', param: null };
  }
}

/** Seconds a client should wait before retrying a 503: long enough for a replica to turn Ready or a failing one to be ejected. */
export const RETRY_AFTER_S = 1;

export function errorBody(kind: RouterErrorKind, message: string): { status: number; body: string } {
  const { status, type, code, param } = shapeOf(kind);
  return { status, body: JSON.stringify({ error: { message, type, param, code } }) };
}

/**
 * Answers with an OpenAI-shaped error. `closeConnection` is for refusals made before the request
 * body was read (413 on Content-Length): the rest of the body would otherwise have to be drained.
 */
export function sendError(
  res: ServerResponse,
  kind: RouterErrorKind,
  message: string,
  closeConnection = false,
  retryAfterS: number = RETRY_AFTER_S,
): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const { status, body } = errorBody(kind, message);
  const headers: Record<string, string | number> = {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(body),
  };
  if (status === 503 || status === 429) headers['retry-after'] = retryAfterS;
  if (status === 401) headers['www-authenticate'] = 'Bearer';
  if (closeConnection) headers.connection = 'close';
  res.writeHead(status, headers);
  res.end(body);
}

/**
 * A 400 for a request body's parameter, as OpenAI answers one: `invalid_request_error` naming
 * `param`, `code` saying whether it was missing or wrong, `message` what to send.
 */
export function sendParamError(
  res: ServerResponse,
  code: 'missing_required_parameter' | 'invalid_value',
  param: string,
  message: string,
): void {
  const body = JSON.stringify({ error: { message, type: 'invalid_request_error', param, code } });
  res.writeHead(400, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

// vLLM's older shape (still what the fake engine and many deployed vLLMs send) and the newer one,
// which is already OpenAI's. Loose, so that extra fields an engine adds do not turn its error
// into "unreadable".
const VllmFlatError = z.looseObject({
  object: z.literal('error'),
  message: z.string(),
  type: z.string().nullish(),
  param: z.string().nullish(),
  code: z.union([z.number(), z.string()]).nullish(),
});
const OpenAIError = z.looseObject({
  error: z.looseObject({
    message: z.string(),
    type: z.string().nullish(),
    param: z.string().nullish(),
    code: z.union([z.number(), z.string()]).nullish(),
  }),
});

/**
 * An engine's error body as OpenAI's shape. The status is the engine's own (the client should see
 * what the engine decided); only a body that is neither of vLLM's shapes is wrapped as text.
 */
export function engineErrorBody(status: number, raw: string): string {
  let json: unknown;
  try {
    json = JSON.parse(raw);
  } catch {
    json = undefined;
  }
  const flat = VllmFlatError.safeParse(json);
  if (flat.success) {
    const { message, type, param, code } = flat.data;
    return JSON.stringify({ error: { message, type: type ?? 'server_error', param: param ?? null, code: code ?? status } });
  }
  const nested = OpenAIError.safeParse(json);
  if (nested.success) {
    const { message, type, param, code } = nested.data.error;
    return JSON.stringify({ error: { message, type: type ?? 'server_error', param: param ?? null, code: code ?? status } });
  }
  const text = raw.trim().slice(0, 1000);
  return JSON.stringify({
    error: {
      message: text || `the engine answered ${status}`,
      type: status >= 500 ? 'server_error' : 'invalid_request_error',
      param: null,
      code: status,
    },
  });
}

/**
 * What a streaming client gets when its engine dies mid-answer: an error event as vLLM itself
 * sends one, then `[DONE]`, so that SDKs raise and line-oriented clients stop.
 */
export function streamErrorEvents(message: string): string {
  const { body } = errorBody('upstream_failed', message);
  return `data: ${body}\n\ndata: [DONE]\n\n`;
}
