// Signed statements as they travel: `<base64url canonical JSON>.<signature>`, readable by anyone,
// made only with the signer's key (the control worker's for placement tickets and weights permits,
// an agent's own for its reports and endpoint attestations). Each kind declares its fields, in the
// one order they are signed in, and its domain (common/signature.ts); this file is the framing they
// share. Process side.
import { parseKeyLine, type CatalogKey, type CatalogKeyring } from './catalog-key.js';
import { signStatement, verifyStatement, type SignatureVerdict } from './signature.js';

/** What one kind of statement signs: its domain and its fields, in their signed order. */
export interface StatementForm<T> {
  /** Its own domain string, so that a signature over one kind never passes for another. */
  domain: string;
  /** Signed always, in this order. */
  fields: readonly (keyof T & string)[];
  /**
   * String fields signed after `fields`, in this order, each only when set: a field added later
   * leaves every statement made before it verifying as it did.
   */
  optional?: readonly (keyof T & string)[];
}

/**
 * The signed bytes: `[name, value]` pairs in the form's order, as JSON. Changing this changes
 * every signature already in agents' state dirs and workflow histories.
 */
function canonical<T>(form: StatementForm<T>, statement: T): string {
  const pairs: [string, unknown][] = form.fields.map((field) => [field, statement[field]]);
  for (const field of form.optional ?? []) if (statement[field] !== undefined) pairs.push([field, statement[field]]);
  return JSON.stringify(pairs);
}

/** `statement` as `<base64url canonical JSON>.<signature>` under the form's domain. */
export function signedStatement<T>(form: StatementForm<T>, statement: T, keyring: CatalogKeyring): string {
  const bytes = canonical(form, statement);
  return `${Buffer.from(bytes, 'utf8').toString('base64url')}.${signStatement(form.domain, bytes, keyring)}`;
}

function parse<T>(form: StatementForm<T>, body: string): T | undefined {
  const optional = form.optional ?? [];
  try {
    const pairs = JSON.parse(Buffer.from(body, 'base64url').toString('utf8')) as unknown;
    if (!Array.isArray(pairs) || pairs.length < form.fields.length || pairs.length > form.fields.length + optional.length) return undefined;
    const out: Record<string, unknown> = {};
    let next = 0;
    for (const [index, pair] of pairs.entries()) {
      if (!Array.isArray(pair)) return undefined;
      if (index < form.fields.length) {
        if (pair[0] !== form.fields[index]) return undefined;
      } else {
        // The optional fields keep their order; one left out is skipped.
        while (next < optional.length && optional[next] !== pair[0]) next++;
        if (next === optional.length || typeof pair[1] !== 'string') return undefined;
        next++;
      }
      out[pair[0] as string] = pair[1];
    }
    return out as T;
  } catch {
    return undefined;
  }
}

/** What `text` says, its signature unchecked: only for one verified before (a recorded spec's). */
export function readStatement<T>(form: StatementForm<T>, text: string): T | undefined {
  const dot = text.indexOf('.');
  return dot > 0 ? parse(form, text.slice(0, dot)) : undefined;
}

export type OpenedStatement<T> =
  | { ok: true; statement: T; legacy: boolean }
  /** The statement itself is not one this form reads (`malformed` is the signature's, below). */
  | { ok: false; why: 'unreadable' }
  /** The enrolled agent key given to verify with is not a key line; `message` says why. */
  | { ok: false; why: 'bad-key'; message: string }
  | Exclude<SignatureVerdict, { ok: true }>;

/**
 * `text` read and its signature checked under the form's domain, against `keys` (the control
 * worker's) or the one enrolled agent key line `keys` names (`ed25519-public:…`). What it says is
 * the caller's to check: a genuine statement for another node or run is still genuine.
 */
export function openStatement<T>(form: StatementForm<T>, text: string, keys: CatalogKey[] | string): OpenedStatement<T> {
  const statement = readStatement(form, text);
  if (!statement) return { ok: false, why: 'unreadable' };
  let verifying: CatalogKey[];
  try {
    verifying = typeof keys === 'string' ? [parseKeyLine(keys, 'the enrolled agent key')] : keys;
  } catch (error) {
    return { ok: false, why: 'bad-key', message: (error as Error).message };
  }
  const verdict = verifyStatement(form.domain, canonical(form, statement), text.slice(text.indexOf('.') + 1), verifying);
  return verdict.ok ? { ok: true, statement, legacy: verdict.legacy } : verdict;
}

/**
 * Why a statement did not open, in words: `<noun> is malformed`, or `<noun> does not verify
 * [against <whose key>] (<why>)`.
 */
export function openingProblem(failure: Exclude<OpenedStatement<unknown>, { ok: true }>, noun: string, against?: string): string {
  if (failure.why === 'unreadable') return `${noun} is malformed`;
  if (failure.why === 'bad-key') return failure.message;
  return `${noun} does not verify${against !== undefined ? ` against ${against}` : ''} (${failure.why})`;
}

/**
 * Each of `fields` whose signed value is not `expected`'s (the subject it is for, and whatever
 * else binds it), as `it <verb> <field> <signed>, not <expected>`; one `expected` leaves out is not checked.
 */
export function fieldMismatches<T>(said: T, expected: Partial<T>, fields: readonly (keyof T & string)[], verb: string): string[] {
  const problems: string[] = [];
  for (const field of fields) {
    const wanted = expected[field];
    if (wanted !== undefined && said[field] !== wanted)
      problems.push(`it ${verb} ${field} ${JSON.stringify(said[field])}, not ${JSON.stringify(wanted)}`);
  }
  return problems;
}

/** A time in a problem's words; a signed value that is not a time is shown as it is. */
function timeOf(ms: unknown): string {
  return typeof ms === 'number' && Number.isFinite(ms) ? new Date(ms).toISOString() : String(ms);
}

/** When a statement holds, as its verifier sees it; each bound left out is not checked. */
export interface SigningWindow {
  /** The verifier's clock (ms since the epoch). */
  now?: number;
  /** How far ahead of `now` it may be signed: hosts' clocks differ. */
  clockSkewMs?: number;
  /** Until when it holds (ms since the epoch). */
  expiresAt?: number;
  /** A genuine one is signed at or after `at`; `earlier` says what one signed before it is. */
  notBefore?: { at: number; earlier: string };
}

/** Every way a statement signed at `signedAt` falls outside `window`, each said of `subject` ([] when inside). */
export function windowProblems(signedAt: number, window: SigningWindow, subject = 'it'): string[] {
  const { now, clockSkewMs, expiresAt, notBefore } = window;
  const problems: string[] = [];
  if (now !== undefined && clockSkewMs !== undefined && (!Number.isFinite(signedAt) || signedAt > now + clockSkewMs))
    problems.push(`${subject} was signed in the future (the host clock is off)`);
  if (now !== undefined && expiresAt !== undefined && !(expiresAt > now)) problems.push(`${subject} expired at ${timeOf(expiresAt)}`);
  if (notBefore !== undefined && !(signedAt >= notBefore.at))
    problems.push(`${subject} was signed at ${timeOf(signedAt)}, ${notBefore.earlier}`);
  return problems;
}
