// The catalog's one definition: which models may run, and with which engine profile on
// which GPU class. Pure zod, no I/O: the control worker, the CLI and tests all parse with it.
import { z } from 'zod';
import { SafeName } from '../common/safe-name.js';
import { ENGINE_MARKER_ENV } from '../common/names.js';
import { AutoscaleSchema } from '../common/autoscale.js';
import { CatalogAdapter, ProfileAdapters, checkAdapterNames, checkModelAdapters } from './adapters.js';
import { parseModelSource } from '../common/model-source.js';
import { CatalogSleep, sleepRefusal } from './sleep.js';

export const ENGINES = ['vllm', 'sglang', 'fake', 'llamacpp'] as const;
export type EngineName = (typeof ENGINES)[number];

export const LAUNCHERS = ['native', 'ray'] as const;
export type LauncherName = (typeof LAUNCHERS)[number];

/** Engines that can be spread over nodes through a Ray cluster. SGLang brings its own launcher. */
const RAY_ENGINES: readonly EngineName[] = ['vllm', 'fake'];

/**
 * Variables the agent sets on every engine it starts. A catalog value would either be
 * overwritten or, worse, make an engine claim GPUs or an identity that is not its own.
 */
export const RESERVED_ENV: readonly string[] = [...Object.values(ENGINE_MARKER_ENV), 'CUDA_VISIBLE_DEVICES'];

// Model names end up inside workflow ids (deployment/<name>, replica/<name>/<seq>) and
// search attributes, so they are held to what is safe there. Profile names travel with them.
const NAME_PATTERN = /^[a-z0-9][a-z0-9._-]*$/;
const ENV_NAME_PATTERN = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** A strict object whose unknown-key error lists the keys that are allowed, since a typo is the usual cause. */
function strictObject<Shape extends z.ZodRawShape>(what: string, shape: Shape) {
  const allowed = Object.keys(shape).join(', ');
  return z.strictObject(shape, {
    error: (issue) => {
      if (issue.code === 'unrecognized_keys') {
        const keys = issue.keys.map((key) => `"${key}"`).join(', ');
        return `unknown key${issue.keys.length > 1 ? 's' : ''} ${keys} in ${what} (allowed: ${allowed})`;
      }
      if (issue.code === 'invalid_type') return `expected ${what} to be a mapping, got ${describeValue(issue.input)}`;
      return undefined;
    },
  });
}

export function describeValue(value: unknown): string {
  if (value === null || value === undefined) return 'nothing';
  if (Array.isArray(value)) return 'a list';
  if (typeof value === 'object') return 'a mapping';
  if (typeof value === 'string') return `the string ${JSON.stringify(value)}`;
  return `${typeof value} ${String(value)}`;
}

function name(what: string) {
  return z
    .string()
    .regex(
      NAME_PATTERN,
      `${what} must start with a lowercase letter or digit and contain only lowercase letters, digits, ".", "_" and "-" (it becomes part of workflow ids)`,
    );
}

const count = (min: number) => z.int().min(min);

const Engine = z.enum(ENGINES, {
  error: (issue) =>
    issue.code === 'invalid_value' ? `unknown engine ${JSON.stringify(issue.input)} (expected one of ${ENGINES.join(', ')})` : undefined,
});

const Launcher = z.enum(LAUNCHERS, {
  error: (issue) =>
    issue.code === 'invalid_value'
      ? `unknown launcher ${JSON.stringify(issue.input)} (expected one of ${LAUNCHERS.join(', ')})`
      : undefined,
});

// YAML turns an unquoted 8192 into a number; passing it on as "8192" would hide that the
// value may not be what the author wrote (0.90 is read as 0.9), so it is an error instead.
const Arg = z.string({
  error: (issue) =>
    issue.input === undefined ? undefined : `args must be strings; quote this value (YAML read it as ${describeValue(issue.input)})`,
});

const EnvName = z
  .string()
  .regex(ENV_NAME_PATTERN, 'not a valid environment variable name (letters, digits and "_", not starting with a digit)')
  .refine((key) => !RESERVED_ENV.includes(key), {
    message: 'is set by the agent on every engine it starts and cannot be set in the catalog',
  });

/**
 * A value the agent takes from its own host at spawn (its --pass-env and --env-file set), so
 * that a secret is named in the catalog but its value never leaves the host.
 */
const FromHost = z.strictObject(
  { fromHost: z.string().regex(ENV_NAME_PATTERN, 'fromHost must name a variable (letters, digits and "_", not starting with a digit)') },
  {
    error: (issue) =>
      issue.code === 'unrecognized_keys'
        ? `unknown key${issue.keys.length > 1 ? 's' : ''} ${issue.keys.map((key) => `"${key}"`).join(', ')} in an env reference (allowed: fromHost)`
        : undefined,
  },
);

const EnvValue = z.union([z.string(), FromHost], {
  error: (issue) =>
    issue.code === 'invalid_union'
      ? `env values must be strings or {fromHost: NAME} (a variable of the agent's host), got ${describeValue(issue.input)}`
      : undefined,
});

const Env = z.record(EnvName, EnvValue, {
  // A bad key arrives as one "invalid key" issue wrapping the key schema's own; surface the inner one.
  error: (issue) => {
    if (issue.code !== 'invalid_key') return undefined;
    const inner = issue.issues[0]?.message ?? 'is not allowed';
    return `env ${JSON.stringify(issue.input)} ${inner}`;
  },
});

export const CatalogProfile = strictObject('a profile', {
  name: name('a profile name'),
  engine: Engine,
  gpuClass: SafeName('gpuClass'),
  tensorParallel: count(1).default(1),
  pipelineParallel: count(1).default(1),
  gpusPerNode: count(1),
  nodes: count(1).default(1),
  launcher: Launcher.default('native'),
  args: z.array(Arg).default([]),
  env: Env.default({}),
  startupTimeoutSeconds: count(1).default(600),
  minGpuMemoryMib: count(1).optional(),
  /** Autoscaling for deployments of this profile (over the model's and the defaults'). */
  autoscale: AutoscaleSchema.optional(),
  /** LoRA adapters an engine of this profile may hold at once (and their highest rank); absent: none. */
  adapters: ProfileAdapters.optional(),
  /** Idle replicas of this profile sleep, and wake on a request (catalog/sleep.ts, docs/sleep.md); absent: never. */
  sleep: CatalogSleep.optional(),
}).superRefine(
  (profile, ctx) => {
    const parallel = profile.tensorParallel * profile.pipelineParallel;
    const gpus = profile.gpusPerNode * profile.nodes;
    if (parallel !== gpus) {
      ctx.addIssue({
        code: 'custom',
        path: ['tensorParallel'],
        message: `tensorParallel ${profile.tensorParallel} × pipelineParallel ${profile.pipelineParallel} = ${parallel} GPU${parallel === 1 ? '' : 's'}, but gpusPerNode ${profile.gpusPerNode} × nodes ${profile.nodes} = ${gpus}`,
      });
    }
    if (profile.launcher === 'ray' && !RAY_ENGINES.includes(profile.engine)) {
      ctx.addIssue({
        code: 'custom',
        path: ['launcher'],
        message: `launcher ray is not supported for engine ${profile.engine} (only ${RAY_ENGINES.join(', ')}); ${profile.engine} spreads over nodes with launcher native`,
      });
    }
    if (profile.engine === 'llamacpp' && profile.nodes > 1) {
      ctx.addIssue({
        code: 'custom',
        path: ['nodes'],
        message: `engine llamacpp runs on one node (llama-server splits a model over the GPUs of its host only); nodes ${profile.nodes} is not supported`,
      });
    }
    if (profile.engine === 'llamacpp' && profile.adapters !== undefined) {
      ctx.addIssue({
        code: 'custom',
        path: ['adapters'],
        message:
          'engine llamacpp loads LoRA adapters only at start (--lora), not at run time: remove adapters, or give the adapter as an arg',
      });
    }
    const cannotSleep = profile.sleep === undefined ? undefined : sleepRefusal(profile.engine);
    if (cannotSleep !== undefined) ctx.addIssue({ code: 'custom', path: ['sleep'], message: cannotSleep });
    if (profile.engine === 'vllm' && profile.nodes > 1 && profile.launcher === 'native') {
      ctx.addIssue({
        code: 'custom',
        path: ['launcher'],
        message: `engine vllm on ${profile.nodes} nodes needs launcher ray (vLLM runs across nodes only through Ray)`,
      });
    }
    // Only on a profile that is otherwise valid: with gpusPerNode 0 or a misspelt engine these
    // checks would add noise about numbers the author is already being told to fix.
  },
  { when: (payload) => payload.issues.length === 0 },
);

// Duplicate-name checks run even when a sibling entry has other errors, so that one
// validate run reports everything; they therefore read their input defensively.
const always = { when: (payload: { value: unknown }) => typeof payload.value === 'object' && payload.value !== null };

function listOf(value: unknown): readonly unknown[] {
  return Array.isArray(value) ? value : [];
}

function nameOf(item: unknown): string | undefined {
  if (typeof item !== 'object' || item === null || !('name' in item)) return undefined;
  return typeof item.name === 'string' ? item.name : undefined;
}

function servedNameOf(item: unknown): string | undefined {
  if (typeof item === 'object' && item !== null && 'servedName' in item && typeof item.servedName === 'string') {
    return item.servedName;
  }
  return nameOf(item);
}

/**
 * Adds an issue at `<list>[i].<field>` for every entry whose key was already used by an
 * earlier one; says whether there was any.
 */
function reportDuplicates(
  ctx: z.RefinementCtx,
  items: readonly unknown[],
  list: string,
  field: string,
  keyOf: (item: unknown) => string | undefined,
  what: string,
): boolean {
  const firstIndex = new Map<string, number>();
  let found = false;
  items.forEach((item, index) => {
    const key = keyOf(item);
    if (key === undefined) return;
    const first = firstIndex.get(key);
    if (first === undefined) {
      firstIndex.set(key, index);
      return;
    }
    found = true;
    ctx.addIssue({ code: 'custom', path: [list, index, field], message: `duplicate ${what} "${key}" (first used at ${list}[${first}])` });
  });
  return found;
}

export const CatalogModel = strictObject('a model', {
  name: name('a model name'),
  source: z
    .string()
    .min(1, 'source must name the weights (hf://ORG/NAME[@REF] or a bare ORG/NAME, s3://BUCKET/PREFIX, file:///PATH, or engine://NAME)')
    .superRefine((text, ctx) => {
      const parsed = parseModelSource(text);
      if (!parsed.ok) ctx.addIssue({ code: 'custom', message: parsed.message });
    }),
  // The name clients put in "model"; the model's name when absent.
  servedName: z.string().min(1).optional(),
  description: z.string().optional(),
  /** Autoscaling for deployments of this model, unless the profile has its own. */
  autoscale: AutoscaleSchema.optional(),
  profiles: z.array(CatalogProfile).min(1, 'a model needs at least one profile'),
  /** LoRA fine-tunes of this model, loaded at run time where requests ask for them. */
  adapters: z.array(CatalogAdapter).optional(),
})
  .superRefine((model, ctx) => {
    reportDuplicates(ctx, listOf(model.profiles), 'profiles', 'name', nameOf, 'profile name');
  }, always)
  .superRefine((model, ctx) => checkModelAdapters(model, ctx));

export const CatalogDefaults = strictObject('defaults', {
  /** Runs of the release before in-flight-aware drains: their fixed wait before a stop. */
  drainGraceSeconds: z.int().min(0).optional(),
  /** A drain waits until the engine has no request in flight, or this long (default 600). */
  drainTimeoutSeconds: z.int().min(0).optional(),
  maxReplicas: count(1).optional(),
  /** Autoscaling for every deployment whose model and profile have none. */
  autoscale: AutoscaleSchema.optional(),
});

export const Catalog = strictObject('the catalog', {
  defaults: CatalogDefaults.optional(),
  // An empty list would tell reconciliation that nothing may run, and it would stop every
  // engine; a catalog emptied by accident must not do that.
  models: z.array(CatalogModel).min(1, 'the catalog needs at least one model'),
  /**
   * Revisions (`r-…`, as `llmgw status` shows them) that must no longer start, restart or be
   * routed anywhere, even while a deployment still runs one (docs/signed-statements.md#revocation).
   */
  revoked: z.array(z.string().regex(/^r-[0-9a-f]{10}$/, 'a revision is r- and 10 hex digits, as llmgw status shows it')).optional(),
})
  .superRefine((catalog, ctx) => {
    const models = listOf(catalog.models);
    const duplicateNames = reportDuplicates(ctx, models, 'models', 'name', nameOf, 'model name');
    // The router finds replicas by the name clients send, so two models must not answer to one.
    // Skipped after duplicate names, which would only be reported a second time.
    if (!duplicateNames) reportDuplicates(ctx, models, 'models', 'servedName', servedNameOf, 'served name');
  }, always)
  .superRefine((catalog, ctx) => checkAdapterNames(catalog, ctx));

export type Catalog = z.infer<typeof Catalog>;
export type CatalogModel = z.infer<typeof CatalogModel>;
export type CatalogProfile = z.infer<typeof CatalogProfile>;
export type CatalogDefaults = z.infer<typeof CatalogDefaults>;
