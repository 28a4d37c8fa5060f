// A request's prompt cut into blocks and named as its engine names them, so the KV index can say
// how much of it an engine holds. Router side. Without the model's tokenizer the router can name
// blocks only for engines whose naming it can reproduce: today the fake engine's (words, chained
// hashes: fake-engine/prefix-cache.ts); vLLM's needs its tokenizer and hash (see docs/routing.md).
import { BlockHasher, chatBlocks } from '../fake-engine/prefix-cache.js';

/** The blocks of a chat or completion body; undefined when it has no prompt we can read. */
export function promptBlocks(body: Buffer, blockSize: number): number[] | undefined {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body.toString('utf8'));
  } catch {
    return undefined;
  }
  if (typeof parsed !== 'object' || parsed === null) return undefined;
  const { messages, prompt } = parsed as { messages?: unknown; prompt?: unknown };
  if (Array.isArray(messages)) {
    const valid = messages.every((m) => typeof m === 'object' && m !== null && typeof (m as { role?: unknown }).role === 'string');
    return valid ? chatBlocks(messages as Array<{ role: string; content?: unknown }>, blockSize) : undefined;
  }
  if (typeof prompt === 'string') {
    const hasher = new BlockHasher(blockSize);
    hasher.feed(prompt);
    return hasher.blocks;
  }
  return undefined;
}
