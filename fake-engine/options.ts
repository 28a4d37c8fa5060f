// The fake engine's command line: turns a vLLM-style argv into typed options. Engine side:
// the agent hands the fake engine the same argv it would hand vLLM, so flags we do not know
// are accepted and skipped rather than rejected.
import { z } from 'zod';
import { parseKvEventsConfig, type KvEventsSettings } from './kv-events.js';
import { DEFAULT_LORA } from './lora.js';

import { DEFAULTS, fakeEngineOptions, type FakeEngineOptions, type LeaderAddress } from './options-types.js';

export { fakeEngineOptions, type FakeEngineOptions, type LeaderAddress };

export class FakeEngineArgsError extends Error {
  override name = 'FakeEngineArgsError';
}

// Flags whose value we use. Two SGLang spellings mean exactly what ours do, so they are
// honoured too; every other foreign flag (`--tp`, `--tensor-parallel-size`, …) is skipped.
const VALUE_FLAGS = {
  '--host': 'host',
  '--port': 'port',
  '--model': 'model',
  '--model-path': 'model',
  '--load-time': 'loadTime',
  '--weights': 'weights',
  '--weights-load-rate': 'weightsLoadRate',
  '--tokens-per-second': 'tokensPerSecond',
  '--max-concurrency': 'maxConcurrency',
  '--prefill-tokens-per-second': 'prefillTokensPerSecond',
  '--prefix-cache-blocks': 'prefixCacheBlocks',
  '--block-size': 'blockSize',
  '--embedding-dim': 'embeddingDim',
  '--max-model-len': 'maxModelLen',
  '--crash-after': 'crashAfter',
  '--unhealthy-after': 'unhealthyAfter',
  '--nnodes': 'nnodes',
  '--node-rank': 'nodeRank',
  '--leader': 'leader',
  '--dist-init-addr': 'leader',
  '--print-env': 'printEnv',
  '--kv-events-config': 'kvEventsConfig',
  '--api-key': 'apiKey',
  '--max-loras': 'maxLoras',
  '--max-lora-rank': 'maxLoraRank',
  '--lora-load-time': 'loraLoadTime',
  '--ssl-certfile': 'sslCertfile',
  '--ssl-keyfile': 'sslKeyfile',
  '--wake-seconds': 'wakeSeconds',
  '--gpu-memory-utilization': 'gpuMemoryUtilization',
  '--weights-mib': 'weightsMib',
} as const;

type ValueKey = (typeof VALUE_FLAGS)[keyof typeof VALUE_FLAGS];

const BOOLEAN_FLAGS = {
  '--hang': 'hang',
  '--fail-start': 'failStart',
  '--enable-lora': 'enableLora',
  '--enable-sleep-mode': 'enableSleepMode',
} as const;

/** Every flag the fake engine reads; fake-engine/usage.ts describes each one. */
export type FakeEngineFlag = keyof typeof VALUE_FLAGS | keyof typeof BOOLEAN_FLAGS | '--served-model-name';

const seconds = (flag: string) => z.coerce.number({ error: `${flag} must be a number of seconds` }).min(0, `${flag} must be >= 0`);
const count = (flag: string, min: number) =>
  z.coerce
    .number({ error: `${flag} must be an integer` })
    .int(`${flag} must be an integer`)
    .min(min, `${flag} must be >= ${min}`);

const RawOptions = z.object({
  host: z.string().min(1, '--host must not be empty').optional(),
  port: count('--port', 0).max(65535, '--port must be <= 65535').optional(),
  model: z.string().min(1, '--model must not be empty').optional(),
  loadTime: seconds('--load-time').optional(),
  weights: z.string().min(1, '--weights must name a directory').optional(),
  weightsLoadRate: z.coerce
    .number({ error: '--weights-load-rate must be bytes per second' })
    .positive('--weights-load-rate must be > 0')
    .optional(),
  tokensPerSecond: z.coerce.number({ error: '--tokens-per-second must be a number' }).min(0, '--tokens-per-second must be >= 0').optional(),
  maxConcurrency: count('--max-concurrency', 1).optional(),
  prefillTokensPerSecond: z.coerce
    .number({ error: '--prefill-tokens-per-second must be a number' })
    .min(0, '--prefill-tokens-per-second must be >= 0')
    .optional(),
  prefixCacheBlocks: count('--prefix-cache-blocks', 0).optional(),
  blockSize: count('--block-size', 1).optional(),
  embeddingDim: count('--embedding-dim', 1).max(65536, '--embedding-dim must be <= 65536').optional(),
  maxModelLen: count('--max-model-len', 1).optional(),
  crashAfter: seconds('--crash-after').optional(),
  unhealthyAfter: seconds('--unhealthy-after').optional(),
  nnodes: count('--nnodes', 1).optional(),
  nodeRank: count('--node-rank', 0).optional(),
  leader: z.string().optional(),
  printEnv: z
    .string()
    .regex(/^[A-Za-z_][A-Za-z0-9_]*(,[A-Za-z_][A-Za-z0-9_]*)*$/, '--print-env must be NAME[,NAME…]')
    .optional(),
  kvEventsConfig: z.string().optional(),
  apiKey: z.string().min(1, '--api-key must not be empty').optional(),
  maxLoras: count('--max-loras', 1).optional(),
  maxLoraRank: count('--max-lora-rank', 1).optional(),
  loraLoadTime: seconds('--lora-load-time').optional(),
  sslCertfile: z.string().min(1, '--ssl-certfile must name a file').optional(),
  sslKeyfile: z.string().min(1, '--ssl-keyfile must name a file').optional(),
  wakeSeconds: seconds('--wake-seconds').optional(),
  gpuMemoryUtilization: z.coerce
    .number({ error: '--gpu-memory-utilization must be a number' })
    .gt(0, '--gpu-memory-utilization must be > 0')
    .max(1, '--gpu-memory-utilization must be <= 1')
    .optional(),
  weightsMib: count('--weights-mib', 0).optional(),
});

/**
 * Parses the fake engine's argv (without the program name). Accepts `--flag value` and
 * `--flag=value`, an optional leading `serve <model>` as vLLM takes it, and skips unknown
 * flags (with the following argument as their value unless it looks like a flag).
 * Throws FakeEngineArgsError naming the offending flag.
 */
export function parseFakeEngineArgs(argv: string[]): FakeEngineOptions {
  const raw: Partial<Record<ValueKey, string>> = {};
  const served: string[] = [];
  const positionals: string[] = [];
  let hang = false;
  let failStart = false;
  let enableLora = false;
  let enableSleepMode = false;

  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] as string;
    if (!arg.startsWith('-') || arg === '-') {
      positionals.push(arg);
      continue;
    }
    const eq = arg.indexOf('=');
    const flag = eq > 0 ? arg.slice(0, eq) : arg;
    const inline = eq > 0 ? arg.slice(eq + 1) : undefined;
    const next = argv[i + 1];
    const nextIsValue = next !== undefined && !next.startsWith('--');

    if (flag in BOOLEAN_FLAGS) {
      if (inline !== undefined) throw new FakeEngineArgsError(`${flag} takes no value`);
      const which = BOOLEAN_FLAGS[flag as keyof typeof BOOLEAN_FLAGS];
      if (which === 'hang') hang = true;
      else if (which === 'failStart') failStart = true;
      else if (which === 'enableSleepMode') enableSleepMode = true;
      else enableLora = true;
      continue;
    }
    if (flag === '--served-model-name') {
      // vLLM takes several names after one flag (nargs='+').
      if (inline !== undefined) served.push(inline);
      else {
        while (argv[i + 1] !== undefined && !(argv[i + 1] as string).startsWith('--')) served.push(argv[++i] as string);
      }
      if (served.length === 0) throw new FakeEngineArgsError('--served-model-name needs a value');
      continue;
    }
    if (flag in VALUE_FLAGS) {
      const key = VALUE_FLAGS[flag as keyof typeof VALUE_FLAGS];
      let value = inline;
      if (value === undefined) {
        if (next === undefined || next.startsWith('--')) throw new FakeEngineArgsError(`${flag} needs a value`);
        value = next;
        i++;
      }
      raw[key] = value;
      continue;
    }
    // A flag vLLM or SGLang would take: skip it, and its value if it has one.
    if (inline === undefined && nextIsValue) i++;
  }

  if (positionals[0] === 'serve') positionals.shift();
  if (positionals.length > 1) {
    throw new FakeEngineArgsError(`unexpected arguments: ${positionals.slice(1).join(' ')}`);
  }
  if (positionals[0] !== undefined && raw.model === undefined) raw.model = positionals[0];

  return optionsFrom(raw, served, { hang, failStart, enableLora, enableSleepMode });
}

/** The flags' values checked (ranges, rank against node count, leader, KV-events) and defaulted. */
function optionsFrom(
  raw: Partial<Record<ValueKey, string>>,
  served: string[],
  { hang, failStart, enableLora, enableSleepMode }: { hang: boolean; failStart: boolean; enableLora: boolean; enableSleepMode: boolean },
): FakeEngineOptions {
  const parsed = RawOptions.safeParse(raw);
  if (!parsed.success) {
    throw new FakeEngineArgsError(parsed.error.issues.map((issue) => issue.message).join('; '));
  }
  const o = parsed.data;
  const nnodes = o.nnodes ?? DEFAULTS.nnodes;
  const nodeRank = o.nodeRank ?? DEFAULTS.nodeRank;
  if (nodeRank >= nnodes) throw new FakeEngineArgsError(`--node-rank ${nodeRank} must be below --nnodes ${nnodes}`);
  if (nodeRank === 0 && o.port === undefined) throw new FakeEngineArgsError('--port is required (rank 0 serves HTTP)');
  const leader = o.leader === undefined ? undefined : parseLeader(o.leader);
  if (nnodes > 1 && leader === undefined) throw new FakeEngineArgsError('--leader HOST:PORT is required when --nnodes > 1');

  if ((o.sslCertfile === undefined) !== (o.sslKeyfile === undefined))
    throw new FakeEngineArgsError('--ssl-certfile and --ssl-keyfile go together');

  let kvEvents: KvEventsSettings | undefined;
  try {
    kvEvents = o.kvEventsConfig === undefined ? undefined : parseKvEventsConfig(o.kvEventsConfig);
  } catch (err) {
    throw new FakeEngineArgsError((err as Error).message);
  }

  const model = o.model ?? DEFAULTS.model;
  const [first = model, ...rest] = served;
  return {
    host: o.host ?? DEFAULTS.host,
    port: o.port,
    model,
    servedModelNames: [first, ...rest],
    loadTimeS: o.loadTime ?? DEFAULTS.loadTimeS,
    ...(o.weights !== undefined ? { weights: o.weights } : {}),
    ...(o.weightsLoadRate !== undefined ? { weightsLoadRate: o.weightsLoadRate } : {}),
    tokensPerSecond: o.tokensPerSecond ?? DEFAULTS.tokensPerSecond,
    maxConcurrency: o.maxConcurrency ?? DEFAULTS.maxConcurrency,
    prefillTokensPerSecond: o.prefillTokensPerSecond ?? DEFAULTS.prefillTokensPerSecond,
    prefixCacheBlocks: o.prefixCacheBlocks ?? DEFAULTS.prefixCacheBlocks,
    blockSize: o.blockSize ?? DEFAULTS.blockSize,
    embeddingDim: o.embeddingDim ?? DEFAULTS.embeddingDim,
    maxModelLen: o.maxModelLen ?? DEFAULTS.maxModelLen,
    kvEvents,
    lora: enableLora
      ? {
          maxLoras: o.maxLoras ?? DEFAULT_LORA.maxLoras,
          maxLoraRank: o.maxLoraRank ?? DEFAULT_LORA.maxLoraRank,
          loadTimeS: o.loraLoadTime ?? DEFAULT_LORA.loadTimeS,
        }
      : undefined,
    crashAfterS: o.crashAfter,
    unhealthyAfterS: o.unhealthyAfter,
    hang,
    failStart,
    printEnv: o.printEnv ? o.printEnv.split(',') : [],
    nnodes,
    nodeRank,
    leader,
    ...(o.apiKey !== undefined ? { apiKey: o.apiKey } : {}),
    ...(o.sslCertfile !== undefined && o.sslKeyfile !== undefined ? { tls: { certFile: o.sslCertfile, keyFile: o.sslKeyfile } } : {}),
    ...(enableSleepMode ? { sleepMode: true } : {}),
    wakeSeconds: o.wakeSeconds ?? DEFAULTS.wakeSeconds,
    gpuMemoryUtilization: o.gpuMemoryUtilization ?? DEFAULTS.gpuMemoryUtilization,
    ...(o.weightsMib !== undefined ? { weightsMib: o.weightsMib } : {}),
  };
}

/** `host:port`, `[v6]:port`, or SGLang's `tcp://host:port`. */
export function parseLeader(value: string): LeaderAddress {
  const stripped = value.replace(/^tcp:\/\//, '');
  const match = /^(?:\[([^\]]+)\]|([^:]+)):(\d+)$/.exec(stripped);
  const port = match ? Number(match[3]) : NaN;
  const host = match ? (match[1] ?? match[2]) : undefined;
  if (host === undefined || !Number.isInteger(port) || port > 65535) {
    throw new FakeEngineArgsError(`--leader must be HOST:PORT, got "${value}"`);
  }
  return { host, port };
}
