// Deterministic "generation" for the fake engine: a seeded PRNG over a fixed word list, so the
// same prompt and model always give the same tokens. Engine side; one token is one word.

// 128 words: a power of two so a token is picked with a mask, not a modulo.
const WORDS = (
  'the of and to in is that it for as with was on be by at this from or an are not have ' +
  'but had his they which one you were all her she there would their we him been has when ' +
  'who will more no if out so said what up its about into than them can only other new ' +
  'some could time these two may then do first any my now such like our over man me even ' +
  'most made after also did many before must through back years where much your way well ' +
  'down should because each just those people how too little state good very make world ' +
  'still own see men work long get here between both life being under never day same last'
).split(' ');
if (WORDS.length !== 128) throw new Error(`fake engine word list must hold 128 words, has ${WORDS.length}`);

const MASK = WORDS.length - 1;

/** Token texts: index i < 128 is word i opening the output (capitalised, no space); i >= 128 is " word". */
export const TOKEN_TEXT: readonly string[] = [...WORDS.map((w) => w.charAt(0).toUpperCase() + w.slice(1)), ...WORDS.map((w) => ` ${w}`)];
/** The same tokens already JSON-encoded, so streaming never calls JSON.stringify per token. */
export const TOKEN_JSON: readonly string[] = TOKEN_TEXT.map((t) => JSON.stringify(t));

export const HASH_START = 0x811c9dc5;

/** FNV-1a over UTF-16 code units, continuing from `h`: several strings hash without concatenation. */
export function hashString(h: number, s: string): number {
  for (let i = 0; i < s.length; i++) {
    h = Math.imul(h ^ s.charCodeAt(i), 0x01000193);
  }
  // A separator so ["ab","c"] and ["a","bc"] differ.
  return Math.imul(h ^ 0xff, 0x01000193) >>> 0;
}

export function hashNumber(h: number, n: number): number {
  return Math.imul(h ^ (n | 0), 0x01000193) >>> 0;
}

/** mulberry32: tiny, fast, and good enough to make text look varied. */
export class Prng {
  private state: number;
  constructor(seed: number) {
    this.state = seed >>> 0;
  }
  nextUint32(): number {
    this.state = (this.state + 0x6d2b79f5) >>> 0;
    let t = this.state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (t ^ (t >>> 14)) >>> 0;
  }
  /** Uniform in [0, 1). */
  next(): number {
    return this.nextUint32() / 4294967296;
  }
}

/** Yields token indexes into TOKEN_TEXT / TOKEN_JSON; the first one has no leading space. */
export class TokenStream {
  private readonly prng: Prng;
  private produced = 0;
  constructor(seed: number) {
    this.prng = new Prng(seed);
  }
  next(): number {
    const word = this.prng.nextUint32() & MASK;
    return this.produced++ === 0 ? word : word + WORDS.length;
  }
}

/** The whole completion as one string, for non-streaming answers. */
export function completionText(seed: number, tokens: number): string {
  const stream = new TokenStream(seed);
  let text = '';
  for (let i = 0; i < tokens; i++) text += TOKEN_TEXT[stream.next()];
  return text;
}

/** A rough token count for usage: whitespace-separated words, at least 1 for non-empty text. */
export function countWords(s: string): number {
  let words = 0;
  let inWord = false;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    const space = c === 32 || (c >= 9 && c <= 13);
    if (!space && !inWord) words++;
    inWord = !space;
  }
  return words;
}

/** A deterministic unit-norm vector for one embedding input. */
export function embeddingVector(seed: number, dim: number): Float32Array {
  const prng = new Prng(seed);
  const v = new Float32Array(dim);
  let norm = 0;
  for (let i = 0; i < dim; i++) {
    const x = prng.next() * 2 - 1;
    v[i] = x;
    norm += x * x;
  }
  norm = Math.sqrt(norm);
  if (norm === 0) {
    v[0] = 1;
    return v;
  }
  for (let i = 0; i < dim; i++) v[i] = (v[i] as number) / norm;
  return v;
}
