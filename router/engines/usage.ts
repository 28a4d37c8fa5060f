// The token usage an engine reports in its answer, read from the bytes as they pass and added to
// the API key's counters (http/limits.ts holds the key's gate). Router side; engines/exchange.ts
// calls it on each chunk of an answer.
import type { AnsweringKey } from './routed-request.js';

const USAGE = Buffer.from('"usage":');
const PROMPT = Buffer.from('"prompt_tokens":');
const COMPLETION = Buffer.from('"completion_tokens":');

/**
 * The token usage in a piece of an engine's answer: the `usage` object of a JSON completion or
 * of a stream's last event (with stream_options.include_usage). Engines write it in one piece
 * at the end, so a chunk either holds it whole or not at all.
 */
export function readUsage(chunk: Buffer): { prompt: number; completion: number } | undefined {
  let at = chunk.lastIndexOf(USAGE);
  if (at < 0) return undefined;
  at += USAGE.length;
  while (chunk[at] === 0x20) at++;
  if (chunk[at] !== 0x7b /* { */) return undefined;
  const prompt = numberAfter(chunk, chunk.indexOf(PROMPT, at), PROMPT.length);
  const completion = numberAfter(chunk, chunk.indexOf(COMPLETION, at), COMPLETION.length);
  return prompt === undefined && completion === undefined ? undefined : { prompt: prompt ?? 0, completion: completion ?? 0 };
}

function numberAfter(b: Buffer, at: number, skip: number): number | undefined {
  if (at < 0) return undefined;
  let i = at + skip;
  while (b[i] === 0x20) i++;
  let n = 0;
  const start = i;
  for (; i < b.length; i++) {
    const c = b[i] as number;
    if (c < 0x30 || c > 0x39) break;
    n = n * 10 + (c - 0x30);
  }
  return i > start ? n : undefined;
}

/** Adds the usage in a chunk of an answer to its key's token counters. */
export function countUsage(gate: AnsweringKey, chunk: Buffer): void {
  const usage = readUsage(chunk);
  if (usage === undefined) return;
  gate.metrics.promptTokens.inc(usage.prompt);
  gate.metrics.completionTokens.inc(usage.completion);
}
