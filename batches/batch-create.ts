// The body of `POST /v1/batches`, checked with zod, and what a body that is not right is answered:
// OpenAI's `invalid_request_error` naming the parameter at fault and what to send instead.
// Router side (batches-api.ts); the batch workflow is started only from a body that passed.
import { z } from 'zod';
import { BATCH_ENDPOINTS, parseCompletionWindow } from './batch-lines.js';

/** OpenAI's limits on metadata: 16 pairs, keys up to 64 characters, values up to 512. */
const MAX_METADATA_KEYS = 16;
const MAX_METADATA_KEY = 64;
const MAX_METADATA_VALUE = 512;

const CreateBatchBody = z.object({
  input_file_id: z.string().min(1),
  endpoint: z.enum(BATCH_ENDPOINTS),
  // Seconds: `24h` as OpenAI takes it, or shorter (tests and short jobs).
  completion_window: z.string().transform((text, ctx) => {
    const seconds = parseCompletionWindow(text);
    if (seconds === undefined) ctx.addIssue({ code: 'custom', message: 'not a window of at most 24h' });
    return seconds ?? 0;
  }),
  metadata: z
    .record(z.string().max(MAX_METADATA_KEY), z.string().max(MAX_METADATA_VALUE))
    .refine((m) => Object.keys(m).length <= MAX_METADATA_KEYS)
    .nullish(),
});
export type CreateBatchBody = z.output<typeof CreateBatchBody>;

type Param = keyof z.input<typeof CreateBatchBody>;

/** Each parameter's refusal says what to send, quoting what was sent (cut short). */
const WHAT_TO_SEND: Record<Param, (sent: unknown) => string> = {
  input_file_id: (sent) => `input_file_id must be the id of a file uploaded with purpose 'batch' (file-…), not ${shown(sent)}.`,
  endpoint: (sent) => `endpoint must be one of ${JSON.stringify(BATCH_ENDPOINTS)}, not ${shown(sent)}.`,
  completion_window: (sent) => `completion_window must be '24h' (or shorter: '90m', '30s'), not ${shown(sent)}.`,
  metadata: () =>
    `metadata must be an object of at most ${MAX_METADATA_KEYS} string values (keys up to ${MAX_METADATA_KEY} characters, values up to ${MAX_METADATA_VALUE}), or null.`,
};

/** Why a body is refused, in the fields of OpenAI's error object. */
export interface BodyRefusal {
  param: Param;
  code: 'missing_required_parameter' | 'invalid_value';
  message: string;
}

/** The body's parameters, or why it is refused (the first parameter at fault, in the order above). */
export function parseCreateBatch(body: Record<string, unknown>): { body: CreateBatchBody } | { refusal: BodyRefusal } {
  const parsed = CreateBatchBody.safeParse(body);
  if (parsed.success) return { body: parsed.data };
  const faulty = new Set(parsed.error.issues.map((issue) => issue.path[0]));
  const param = (Object.keys(WHAT_TO_SEND) as Param[]).find((p) => faulty.has(p)) ?? 'input_file_id';
  const sent = body[param];
  if (sent === undefined || (sent === null && param !== 'metadata'))
    return { refusal: { param, code: 'missing_required_parameter', message: `Missing required parameter: '${param}'.` } };
  return { refusal: { param, code: 'invalid_value', message: WHAT_TO_SEND[param](sent) } };
}

function shown(sent: unknown): string {
  const text = JSON.stringify(sent) ?? String(sent);
  return text.length > 80 ? `${text.slice(0, 77)}...` : text;
}
