// What clients may send the fake engine and how it refuses them: the OpenAI request bodies
// (as zod schemas, loose so that extra fields vLLM accepts pass) and vLLM's error shape.
// Engine side of the HTTP trust boundary.
import type { ServerResponse } from 'node:http';
import { z } from 'zod';

const maxTokens = z.number().int().min(1).nullish();

const Common = {
  model: z.string().nullish(),
  max_tokens: maxTokens,
  stream: z.boolean().nullish(),
  stream_options: z.looseObject({ include_usage: z.boolean().nullish() }).nullish(),
  seed: z.number().int().nullish(),
};

const ContentPart = z.looseObject({ type: z.string(), text: z.string().optional() });

export const ChatRequest = z.looseObject({
  ...Common,
  max_completion_tokens: maxTokens,
  messages: z
    .array(
      z.looseObject({
        role: z.string(),
        content: z.union([z.string(), z.array(ContentPart), z.null()]).optional(),
      }),
    )
    .min(1),
});
export type ChatRequest = z.infer<typeof ChatRequest>;

const TokenIds = z.array(z.number().int());

export const CompletionRequest = z.looseObject({
  ...Common,
  prompt: z.union([z.string(), z.array(z.string()), TokenIds, z.array(TokenIds)]),
});
export type CompletionRequest = z.infer<typeof CompletionRequest>;

export const EmbeddingRequest = z.looseObject({
  model: z.string().nullish(),
  input: z.union([z.string(), z.array(z.string()), TokenIds, z.array(TokenIds)]),
  encoding_format: z.enum(['float', 'base64']).nullish(),
  dimensions: z.number().int().min(1).max(65536).nullish(),
});
export type EmbeddingRequest = z.infer<typeof EmbeddingRequest>;

export type ErrorType =
  | 'BadRequestError'
  | 'NotFoundError'
  | 'MethodNotAllowedError'
  | 'PayloadTooLargeError'
  | 'ServiceUnavailableError'
  | 'InternalServerError';

function statusOf(type: ErrorType): number {
  switch (type) {
    case 'BadRequestError':
      return 400;
    case 'NotFoundError':
      return 404;
    case 'MethodNotAllowedError':
      return 405;
    case 'PayloadTooLargeError':
      return 413;
    case 'ServiceUnavailableError':
      return 503;
    case 'InternalServerError':
      return 500;
  }
}

/** Answers with vLLM's error body: `{object:"error", message, type, param:null, code}`. */
export function sendError(res: ServerResponse, type: ErrorType, message: string): void {
  const code = statusOf(type);
  const body = JSON.stringify({ object: 'error', message, type, param: null, code });
  res.writeHead(code, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

/** One line naming the path that is wrong, the way a client can act on it. */
export function describeIssues(error: z.ZodError): string {
  return error.issues
    .slice(0, 3)
    .map((issue) => `${issue.path.length ? issue.path.join('.') : 'body'}: ${issue.message}`)
    .join('; ');
}
