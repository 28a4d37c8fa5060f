// API keys for the router's OpenAI endpoints: read from a file and/or LLMGW_API_KEYS, checked
// against the request's `Authorization: Bearer …` in constant time, each with its own limits
// (requests per second, concurrent requests), the models and adapters it may use (key-scope.ts)
// and a label for metrics that is a prefix of the key's digest, never the key. Router side.
import { createHash, timingSafeEqual } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { allowsNothing, scopeOf, type KeyScope } from './key-scope.js';
import { DEFAULT_PRIORITY, parsePriority, type FlowClass } from '../flow/priority.js';

/** A key's limits; undefined means unlimited. */
export interface KeyLimits {
  /** Requests per second, with a burst of one second's worth. */
  rps: number | undefined;
  /** Requests in flight at once. */
  concurrent: number | undefined;
}

export const UNLIMITED: KeyLimits = { rps: undefined, concurrent: undefined };

/** One key as the router knows it: never the key itself. */
export interface ApiKey {
  /** Position in the list: the router keeps each key's live state by it. */
  index: number;
  /** `sha256:` and the first 12 hex digits of the key's SHA-256: what metrics and logs show. */
  label: string;
  /** What refusals name it by: its entry's `id`, else its label. */
  id: string;
  /** The key's whole SHA-256 in hex: what a reload knows it again by. Never shown. */
  fingerprint: string;
  limits: KeyLimits;
  /** The models and adapters it may use; undefined: every one. */
  scope: KeyScope | undefined;
  /** Its tenant (its id unless the entry names one), the tenant's weight, and its priority: flow control's view (flow/). */
  flow: FlowClass;
}

export interface KeySpec {
  key: string;
  limits?: Partial<KeyLimits>;
  /** A name for it the operator chose (a JSON entry's `id`). */
  id?: string;
  scope?: KeyScope;
  /** Its tenant, the tenant's weight and its priority, when the entry gives them. */
  tenant?: string;
  weight?: number;
  priority?: number;
  /** `FILE:LINE`, for an error about the entry. */
  where?: string;
}

export class ApiKeys {
  // Digests, so that every comparison is between equal-length buffers: timingSafeEqual needs that,
  // and comparing raw keys of different lengths would leak the length.
  private readonly digests: Buffer[];
  readonly keys: readonly ApiKey[];

  constructor(keys: ReadonlyArray<string | KeySpec>, defaults: KeyLimits = UNLIMITED) {
    if (keys.length === 0) throw new Error('ApiKeys needs at least one key');
    const specs = keys.map((k) => (typeof k === 'string' ? { key: k } : k));
    this.digests = specs.map((s) => digest(s.key));
    const weights = tenantWeights(specs);
    this.keys = specs.map((s, index) => {
      const label = keyLabel(this.digests[index] as Buffer);
      const id = s.id ?? label;
      const tenant = s.tenant ?? id;
      return {
        index,
        label,
        id,
        fingerprint: (this.digests[index] as Buffer).toString('hex'),
        limits: { rps: s.limits?.rps ?? defaults.rps, concurrent: s.limits?.concurrent ?? defaults.concurrent },
        scope: s.scope,
        flow: { tenant, weight: weights.get(tenant) ?? 1, priority: s.priority ?? DEFAULT_PRIORITY },
      };
    });
    // The first entry of a key wins at check(): were one of two scoped, which would be silent.
    const seen = new Map<string, KeySpec>();
    specs.forEach((s, index) => {
      const hex = (this.digests[index] as Buffer).toString('hex');
      const before = seen.get(hex);
      if (before !== undefined && (before.scope !== undefined || s.scope !== undefined))
        throw new Error(
          `${s.where ?? 'LLMGW_API_KEYS'}: the key of ${before.where ?? 'LLMGW_API_KEYS'} again; a scoped key is listed once`,
        );
      seen.set(hex, s);
    });
  }

  get size(): number {
    return this.digests.length;
  }

  /** The key the Authorization header carries, or undefined. */
  check(authorization: string | undefined): ApiKey | undefined {
    if (authorization === undefined || authorization.length < 8) return undefined;
    if (authorization.slice(0, 7).toLowerCase() !== 'bearer ') return undefined;
    const presented = digest(authorization.slice(7).trim());
    // Every key is compared, so the time taken does not say which one matched.
    let found = -1;
    for (let i = 0; i < this.digests.length; i++) if (timingSafeEqual(this.digests[i] as Buffer, presented) && found < 0) found = i;
    return found < 0 ? undefined : this.keys[found];
  }
}

/**
 * Each named tenant's weight: given on any of its keys' entries, the same wherever it is given
 * (two different weights for one tenant would make its share depend on which key sent).
 */
function tenantWeights(specs: readonly KeySpec[]): Map<string, number> {
  const weights = new Map<string, { weight: number; where: string | undefined }>();
  for (const s of specs) {
    if (s.tenant === undefined || s.weight === undefined) continue;
    const before = weights.get(s.tenant);
    if (before !== undefined && before.weight !== s.weight)
      throw new Error(
        `${s.where ?? 'LLMGW_API_KEYS'}: tenant ${s.tenant} has weight ${before.weight} at ${before.where ?? 'LLMGW_API_KEYS'}; a tenant has one weight`,
      );
    weights.set(s.tenant, { weight: s.weight, where: s.where });
  }
  return new Map([...weights].map(([tenant, w]) => [tenant, w.weight]));
}

function digest(key: string): Buffer {
  return createHash('sha256').update(key).digest();
}

function keyLabel(d: Buffer): string {
  return `sha256:${d.toString('hex').slice(0, 12)}`;
}

const TenantId = z.string().regex(/^[\w.:@/-]{1,64}$/, 'tenant must be 1 to 64 letters, digits or ._:@/-');
const Weight = z.number({ error: 'weight must be a number' }).positive('weight must be > 0').max(1000, 'weight must be <= 1000');
const Priority = z
  .union([z.string(), z.number()], { error: 'priority must be critical, standard, sheddable or an integer' })
  .transform((v, ctx) => {
    const parsed = parsePriority(v);
    if (parsed instanceof Error) {
      ctx.addIssue({ code: 'custom', message: parsed.message });
      return z.NEVER;
    }
    return parsed;
  });

const Limit = z.object({
  rps: z.coerce.number({ error: 'rps must be a number' }).positive('rps must be > 0').optional(),
  concurrent: z.coerce
    .number({ error: 'concurrent must be an integer' })
    .int('concurrent must be an integer')
    .positive('concurrent must be > 0')
    .optional(),
  tenant: TenantId.optional(),
  weight: z.coerce.number({ error: 'weight must be a number' }).pipe(Weight).optional(),
  priority: Priority.optional(),
});

const LINE_OPTIONS = ['rps', 'concurrent', 'tenant', 'weight', 'priority'];

/**
 * One line of a keys file: `KEY` or `KEY rps=N concurrent=N tenant=T weight=W priority=P`. Throws
 * naming what is wrong, but never the key.
 */
export function parseKeyLine(line: string): KeySpec {
  const [key = '', ...options] = line.trim().split(/\s+/);
  const raw: Record<string, string> = {};
  for (const [n, option] of options.entries()) {
    const eq = option.indexOf('=');
    const name = option.slice(0, eq);
    // Named by its place, not its text: a word after the key may be another key (two on one line).
    if (eq <= 0 || !LINE_OPTIONS.includes(name))
      throw new Error(`unknown option (word ${n + 2} of the line; options are ${LINE_OPTIONS.map((o) => `${o}=…`).join(', ')})`);
    raw[name] = option.slice(eq + 1);
  }
  const parsed = Limit.safeParse(raw);
  if (!parsed.success) throw new Error(parsed.error.issues.map((i) => i.message).join('; '));
  const { rps, concurrent, ...flow } = parsed.data;
  if (flow.tenant === key) throw new Error('tenant must not be the key: tenants are shown in metrics and logs');
  return withFlow({ key, limits: { rps, concurrent } }, flow);
}

function withFlow(
  spec: KeySpec,
  flow: { tenant?: string | undefined; weight?: number | undefined; priority?: number | undefined },
): KeySpec {
  if (flow.weight !== undefined && flow.tenant === undefined) throw new Error("weight is a tenant's: name the tenant too (tenant=…)");
  if (flow.tenant !== undefined) spec.tenant = flow.tenant;
  if (flow.weight !== undefined) spec.weight = flow.weight;
  if (flow.priority !== undefined) spec.priority = flow.priority;
  return spec;
}

const Name = z.string().min(1, 'a name must not be empty');

/**
 * One key as a JSON object on its line, the form that can grow: `{"key": "…", "id": "team-a",
 * "models": ["chat"], "adapters": ["team-a-sql"], "rps": 5, "concurrent": 8, "tenant": "team-a",
 * "weight": 3, "priority": "critical"}`. Unknown fields are refused, so a misspelt `model` cannot
 * widen a key to every model.
 */
const KeyEntry = z.strictObject({
  key: z.string().min(1, 'key must not be empty'),
  id: z
    .string()
    .regex(/^[\w.:@/-]{1,64}$/, 'id must be 1 to 64 letters, digits or ._:@/-')
    .optional(),
  rps: z.number({ error: 'rps must be a number' }).positive('rps must be > 0').optional(),
  concurrent: z
    .number({ error: 'concurrent must be an integer' })
    .int('concurrent must be an integer')
    .positive('concurrent must be > 0')
    .optional(),
  models: z.array(Name, { error: 'models must be a list of names' }).optional(),
  adapters: z.array(Name, { error: 'adapters must be a list of names' }).optional(),
  tenant: TenantId.optional(),
  weight: Weight.optional(),
  priority: Priority.optional(),
});

const ENTRY_FIELDS = Object.keys(KeyEntry.shape).join(', ');

/** A line that starts with `{`: one key as JSON. Throws naming what is wrong, never the key or the line's text. */
export function parseKeyEntry(line: string): KeySpec {
  let raw: unknown;
  try {
    raw = JSON.parse(line);
  } catch {
    // JSON.parse's message quotes the text around the fault, which may be the key.
    throw new Error('not a JSON object (a line that starts with `{` is one key as JSON)');
  }
  const parsed = KeyEntry.safeParse(raw);
  if (!parsed.success)
    throw new Error(
      parsed.error.issues
        // An unknown field's name could be the key itself, put where a field name goes.
        .map((i) => (i.code === 'unrecognized_keys' ? `unknown field (the fields are ${ENTRY_FIELDS})` : `${pathOf(i.path)}${i.message}`))
        .join('; '),
    );
  const { key, id, rps, concurrent, models, adapters, tenant, weight, priority } = parsed.data;
  if (id === key) throw new Error('id must not be the key: ids are shown in errors and logs');
  const scope = scopeOf(models, adapters);
  if (scope !== undefined && allowsNothing(scope)) throw new Error('models and adapters name nothing this key may use');
  if (tenant === key) throw new Error('tenant must not be the key: tenants are shown in metrics and logs');
  const spec = withFlow({ key, limits: { rps, concurrent } }, { tenant, weight, priority });
  if (id !== undefined) spec.id = id;
  if (scope !== undefined) spec.scope = scope;
  return spec;
}

function pathOf(path: readonly PropertyKey[]): string {
  return path.length === 0 ? '' : `${path.map(String).join('.')}: `;
}

/**
 * Keys from a file: one a line, `KEY [rps=N] [concurrent=N]` or a JSON object (parseKeyEntry);
 * blank lines and `#` comments skipped. Throws naming the line, never the key.
 */
export function readKeysFile(path: string): KeySpec[] {
  const lines = readFileSync(path, 'utf8').split('\n');
  const out: KeySpec[] = [];
  lines.forEach((line, i) => {
    const text = line.trim();
    if (text === '' || text.startsWith('#')) return;
    const where = `${path}:${i + 1}`;
    try {
      out.push({ ...(text.startsWith('{') ? parseKeyEntry(text) : parseKeyLine(text)), where });
    } catch (err) {
      throw new Error(`${where}: ${(err as Error).message}`, { cause: err });
    }
  });
  return out;
}

/**
 * Keys from LLMGW_API_KEYS: comma- or newline-separated plain keys, or, one a line, JSON entries
 * with a scope and limits as in a keys file (parseKeyEntry). Throws naming the line, never the key.
 */
export function keysFromEnv(env: NodeJS.ProcessEnv = process.env): KeySpec[] {
  const raw = env.LLMGW_API_KEYS;
  if (!raw) return [];
  const out: KeySpec[] = [];
  raw.split('\n').forEach((line, i) => {
    const text = line.trim();
    if (text === '' || text.startsWith('#')) return;
    const where = `LLMGW_API_KEYS line ${i + 1}`;
    if (text.startsWith('{')) {
      try {
        out.push({ ...parseKeyEntry(text), where });
      } catch (err) {
        throw new Error(`${where}: ${(err as Error).message}`, { cause: err });
      }
      return;
    }
    for (const key of text.split(',').map((k) => k.trim())) if (key !== '' && !key.startsWith('#')) out.push({ key, where });
  });
  return out;
}

/** The configured keys from both places, or undefined when none are configured (no auth). */
export function loadApiKeys(options: { file?: string | undefined; env?: NodeJS.ProcessEnv; defaults?: KeyLimits }): ApiKeys | undefined {
  const fromFile = options.file ? readKeysFile(options.file) : [];
  // A keys file that holds no key is a mistake, not a wish to run open.
  if (options.file && fromFile.length === 0) throw new Error(`API keys file ${options.file} holds no key`);
  const keys = [...fromFile, ...keysFromEnv(options.env)];
  return keys.length > 0 ? new ApiKeys(keys, options.defaults) : undefined;
}
