// Reads what the router needs from a request body — `model`, `stream`, `user` and where the
// prompt is — in one pass over the bytes, without decoding the body to a string or building
// its objects. Router side, on the hot path: a chat body is mostly prompt text, which is
// skipped with Buffer.indexOf (native) instead of being parsed here and again by the engine.
//
// The scan checks the top level strictly (an object, keys, separators, nothing after it) and
// nested values only as far as finding where they end (strings and brackets). A body malformed
// deeper inside (`[1,,2]`) goes to the engine, whose 400 reaches the client in OpenAI's shape.

/** What the router reads from an inference request's body. */
export interface RequestFields {
  /** The `model` value when it is a string. */
  model: string | undefined;
  /** Byte range of the `model` value (its quotes included), to put the served name in its place. */
  modelAt: number;
  modelEnd: number;
  stream: boolean;
  /** The `user` value when it is a non-empty string: OpenAI's end-user id, a session key. */
  user: string | undefined;
  /** Byte range of the `messages` or `prompt` value; -1 when there is neither. */
  promptAt: number;
  promptEnd: number;
}

/** The scan's answer for a body that is JSON but not an object (an array, a number). */
export const NOT_AN_OBJECT = 'The request body must be a JSON object.';

const QUOTE = 0x22;
const BACKSLASH = 0x5c;

function isSpace(c: number): boolean {
  return c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;
}

function skipSpace(b: Buffer, i: number): number {
  while (i < b.length && isSpace(b[i] as number)) i++;
  return i;
}

/** `i` is at an opening quote: the index after the closing one, or -1. */
function skipString(b: Buffer, i: number): number {
  let j = b.indexOf(QUOTE, i + 1);
  while (j >= 0) {
    let slashes = 0;
    while (b[j - 1 - slashes] === BACKSLASH) slashes++;
    if ((slashes & 1) === 0) return j + 1;
    j = b.indexOf(QUOTE, j + 1);
  }
  return -1;
}

/** `i` is at the start of a value: the index after it, or -1 when it does not end. */
function skipValue(b: Buffer, i: number): number {
  const c = b[i];
  if (c === QUOTE) return skipString(b, i);
  if (c === 0x7b /* { */ || c === 0x5b /* [ */) {
    let depth = 0;
    for (let k = i; k < b.length; k++) {
      const d = b[k] as number;
      if (d === QUOTE) {
        const after = skipString(b, k);
        if (after < 0) return -1;
        k = after - 1;
      } else if (d === 0x7b || d === 0x5b) depth++;
      else if (d === 0x7d /* } */ || d === 0x5d /* ] */) {
        if (--depth === 0) return k + 1;
      }
    }
    return -1;
  }
  // A number or a literal: letters, digits, sign, point, exponent.
  let k = i;
  while (k < b.length) {
    const d = b[k] as number;
    if (!((d >= 0x30 && d <= 0x39) || (d >= 0x61 && d <= 0x7a) || d === 0x2d || d === 0x2b || d === 0x2e || d === 0x45)) break;
    k++;
  }
  return k > i ? k : -1;
}

function hasBackslash(b: Buffer, at: number, end: number): boolean {
  for (let k = at; k < end; k++) if (b[k] === BACKSLASH) return true;
  return false;
}

function stringAt(b: Buffer, at: number, end: number): string {
  // Escapes are rare in names; JSON.parse handles them exactly when they are there.
  if (!hasBackslash(b, at + 1, end - 1)) return b.toString('utf8', at + 1, end - 1);
  return JSON.parse(b.toString('utf8', at, end)) as string;
}

/** True when bytes [at, end) are the quoted key `key` (ASCII, no escapes). */
function keyIs(b: Buffer, at: number, end: number, key: string): boolean {
  if (end - at !== key.length + 2) return false;
  for (let k = 0; k < key.length; k++) if (b[at + 1 + k] !== key.charCodeAt(k)) return false;
  return true;
}

function literalIs(b: Buffer, at: number, end: number, word: string): boolean {
  return end - at === word.length && keyIs(b, at - 1, end + 1, word);
}

type Key = 'model' | 'messages' | 'prompt' | 'stream' | 'user';

/** Which of the keys we read the quoted key at [at, end) is, if any. */
function knownKey(b: Buffer, at: number, end: number): Key | undefined {
  // The first letter rules out most keys before any comparison.
  switch (b[at + 1]) {
    case 0x6d /* m */:
      if (keyIs(b, at, end, 'model')) return 'model';
      if (keyIs(b, at, end, 'messages')) return 'messages';
      break;
    case 0x70 /* p */:
      if (keyIs(b, at, end, 'prompt')) return 'prompt';
      break;
    case 0x73 /* s */:
      if (keyIs(b, at, end, 'stream')) return 'stream';
      break;
    case 0x75 /* u */:
      if (keyIs(b, at, end, 'user')) return 'user';
      break;
  }
  if (!hasBackslash(b, at + 1, end - 1)) return undefined;
  // An escaped key ("mod\u0065l") means what it decodes to; rare enough to do slowly.
  const key = JSON.parse(b.toString('utf8', at, end)) as string;
  return key === 'model' || key === 'messages' || key === 'prompt' || key === 'stream' || key === 'user' ? key : undefined;
}

/** The fields, or a message saying why the body is not a JSON object. */
export function scanRequest(b: Buffer): RequestFields | string {
  const out: RequestFields = { model: undefined, modelAt: -1, modelEnd: -1, stream: false, user: undefined, promptAt: -1, promptEnd: -1 };
  let i = skipSpace(b, 0);
  if (i === b.length) return 'the body is empty';
  if (b[i] !== 0x7b) return b[i] === 0x5b || b[i] === QUOTE || skipValue(b, i) > i ? NOT_AN_OBJECT : `unexpected byte at ${i}`;
  i = skipSpace(b, i + 1);
  if (b[i] === 0x7d) return afterObject(b, i + 1, out);
  for (;;) {
    if (b[i] !== QUOTE) return `expected a property name at byte ${i}`;
    const keyAt = i;
    const keyEnd = skipString(b, i);
    if (keyEnd < 0) return `unterminated string at byte ${i}`;
    i = skipSpace(b, keyEnd);
    if (b[i] !== 0x3a /* : */) return `expected ':' at byte ${i}`;
    i = skipSpace(b, i + 1);
    const at = i;
    const end = skipValue(b, i);
    if (end < 0) return `unterminated value at byte ${at}`;
    const isString = b[at] === QUOTE;
    switch (knownKey(b, keyAt, keyEnd)) {
      case 'model':
        out.model = isString ? stringAt(b, at, end) : undefined;
        out.modelAt = at;
        out.modelEnd = end;
        break;
      case 'messages':
      case 'prompt':
        out.promptAt = at;
        out.promptEnd = end;
        break;
      case 'stream':
        out.stream = literalIs(b, at, end, 'true');
        break;
      case 'user':
        out.user = isString && end - at > 2 ? stringAt(b, at, end) : undefined;
        break;
      case undefined:
        break;
    }
    i = skipSpace(b, end);
    const sep = b[i];
    if (sep === 0x2c /* , */) {
      i = skipSpace(b, i + 1);
      continue;
    }
    if (sep === 0x7d) return afterObject(b, i + 1, out);
    return i >= b.length ? 'the JSON object is not closed' : `expected ',' or '}' at byte ${i}`;
  }
}

function afterObject(b: Buffer, i: number, out: RequestFields): RequestFields | string {
  return skipSpace(b, i) === b.length ? out : `unexpected data after the JSON object at byte ${i}`;
}

/** The body with the `model` value replaced by `modelJson` (a JSON string's bytes). */
export function withModel(b: Buffer, fields: RequestFields, modelJson: Buffer): Buffer {
  return Buffer.concat([b.subarray(0, fields.modelAt), modelJson, b.subarray(fields.modelEnd)]);
}
