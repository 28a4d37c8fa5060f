// Every hash the router makes of a request, in one place: the cache-aware keys (a session, the
// first bytes of a prompt) that the affinity table homes requests by, and a prompt cut into
// blocks and named as its engine names them, so the KV index can say how much of it an engine
// holds. Router side; the fake engine names its own blocks with BlockHasher from here, so the two
// cannot drift apart. Without the model's tokenizer the router can name blocks only for engines
// whose naming it can reproduce: today the fake engine's (words, chained hashes); vLLM's needs its
// tokenizer and hash (see docs/routing-policies.md).

/** FNV-1a's offset basis: where every hash here starts. */
export const HASH_START = 0x811c9dc5;
const FNV_PRIME = 0x01000193;

/** murmur3's finaliser: spreads FNV-1a's bits evenly over 0..2^32-1. */
function mix(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/** FNV-1a over the first `limit` UTF-16 units, finished with murmur3's mixer for an even spread. */
export function hashText(text: string, limit = text.length): number {
  let h = HASH_START;
  const n = Math.min(limit, text.length);
  for (let i = 0; i < n; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, FNV_PRIME);
  }
  return mix(h);
}

/** FNV-1a over bytes [at, end), finished with murmur3's mixer for an even spread; 0..2^32-1. */
export function hashBytes(b: Uint8Array, at: number, end: number): number {
  let h = HASH_START;
  for (let i = at; i < end; i++) {
    h ^= b[i] as number;
    h = Math.imul(h, FNV_PRIME);
  }
  return mix(h);
}

/** How much of a prompt is its "prefix": enough to cover a system prompt and the first turns. */
export const PREFIX_BYTES = 1024;

/** Where a body's prompt (`messages` or `prompt`, as sent) lies: http/body.ts's scan finds it. */
export interface PromptRange {
  /** Byte range of the prompt's JSON value; -1 when there is none. */
  promptAt: number;
  promptEnd: number;
}

/**
 * A hash of the first `limit` bytes of the prompt, for prefix affinity; -1 when there is no
 * prompt. The JSON text is hashed as it came: requests that share a system prompt share these
 * bytes whatever follows.
 */
export function promptPrefixHash(b: Buffer, range: PromptRange, limit = PREFIX_BYTES): number {
  if (range.promptAt < 0) return -1;
  return hashBytes(b, range.promptAt, Math.min(range.promptEnd, range.promptAt + limit));
}

/** The session key: the x-session-id header, else OpenAI's `user`; -1 when there is neither. */
export function sessionHash(header: string | string[] | undefined, user: string | undefined): number {
  if (typeof header === 'string' && header !== '') return hashText(header);
  return user === undefined ? -1 : hashText(user);
}

/** Chained hashes of a prompt's full blocks, fed piece by piece (a role, a message's text). */
export class BlockHasher {
  readonly blocks: number[] = [];
  private chain = HASH_START;
  private block = HASH_START;
  private wordsInBlock = 0;

  constructor(private readonly blockSize: number) {}

  /** Adds the words of one piece; a piece's end ends its last word. */
  feed(text: string): void {
    let inWord = false;
    for (let i = 0; i < text.length; i++) {
      const c = text.charCodeAt(i);
      if (c === 32 || (c >= 9 && c <= 13)) {
        if (inWord) this.endWord();
        inWord = false;
      } else {
        this.block = Math.imul(this.block ^ c, FNV_PRIME);
        inWord = true;
      }
    }
    if (inWord) this.endWord();
    // A piece boundary is part of the text: ["ab","c"] and ["a","bc"] differ.
    this.block = Math.imul(this.block ^ 0x1e, FNV_PRIME);
  }

  private endWord(): void {
    this.block = Math.imul(this.block ^ 0x20, FNV_PRIME);
    if (++this.wordsInBlock < this.blockSize) return;
    this.chain = Math.imul(this.chain ^ (this.block >>> 0), FNV_PRIME) >>> 0;
    this.chain = Math.imul(this.chain ^ (this.chain >>> 15), 0x2c1b3c6d) >>> 0;
    this.blocks.push(this.chain);
    this.block = HASH_START;
    this.wordsInBlock = 0;
  }
}

/** The block hashes of a chat's messages as the fake engine names them: each role, then its text. */
export function chatBlocks(messages: ReadonlyArray<{ role: string; content?: unknown }>, blockSize: number): number[] {
  const hasher = new BlockHasher(blockSize);
  for (const message of messages) {
    hasher.feed(message.role);
    const content = message.content;
    if (typeof content === 'string') hasher.feed(content);
    else if (Array.isArray(content)) {
      for (const part of content as Array<{ text?: unknown }>) if (typeof part?.text === 'string') hasher.feed(part.text);
    }
  }
  return hasher.blocks;
}

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
