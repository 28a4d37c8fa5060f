// The agent's settings, from `llmgw agent` flags, validated in one place so that a bad
// flag stops the agent with a message naming it rather than half-starting it.
import { hostname } from 'node:os';
import { join, resolve } from 'node:path';
import { z } from 'zod';
import { DEFAULT_AGENT_ADMIN_ADDR, DEFAULT_PORTS } from '../common/names.js';
import { DEFAULT_RAY_PORT_BLOCK, MIN_RAY_PORT_BLOCK } from './engines/ray-ports.js';
import { SAFE_NAME, SAFE_NAME_RULE } from '../common/safe-name.js';
import { DEFAULT_LOST_GRACE_SECONDS } from '../common/node-types.js';

const PortRange = z
  .string()
  .regex(/^\d+-\d+$/, 'expected FROM-TO, e.g. 18000-18999')
  .transform((text) => {
    const [from, to] = text.split('-').map(Number) as [number, number];
    return { from, to };
  })
  .refine((range) => range.from >= 1024 && range.to <= 65535 && range.from <= range.to, 'ports must be within 1024-65535 and FROM ≤ TO');

// Uids below 1000 belong to the system's own accounts; a range of them would hand an engine
// their files. Above 2^31 - 2 some tools read a uid as negative (and 2^32 - 1 means "none").
const UidRange = z
  .string()
  .regex(/^\d+-\d+$/, 'expected START-END, e.g. 61000-61999')
  .transform((text) => {
    const [from, to] = text.split('-').map(Number) as [number, number];
    return { from, to };
  })
  .refine((range) => range.from >= 1000 && range.to >= 1000, 'both ends must be at least 1000 (lower uids are system accounts)')
  .refine((range) => range.to <= 2 ** 31 - 2, 'uids must be below 2147483647')
  .refine((range) => range.from <= range.to, 'START must not be above END');

const Labels = z.string().transform((text, ctx) => {
  const labels: Record<string, string> = {};
  for (const pair of text.split(',').filter(Boolean)) {
    const [key, ...rest] = pair.split('=');
    if (!key || !rest.length || !/^[A-Za-z0-9._/-]+$/.test(key)) {
      ctx.addIssue({ code: 'custom', message: `bad label ${JSON.stringify(pair)}: expected key=value` });
      return z.NEVER;
    }
    labels[key] = rest.join('=');
  }
  return labels;
});

const EnvNames = z
  .string()
  .regex(/^[A-Za-z_][A-Za-z0-9_]*(,[A-Za-z_][A-Za-z0-9_]*)*$/, 'expected variable names like HF_TOKEN,HF_HOME')
  .transform((text) => text.split(','));

const UNIT_MS: Record<string, number> = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };
const Duration = z
  .string()
  .regex(/^\d+[smhd]$/, 'expected a duration like 7d, 12h, 30m or 90s')
  .transform((text) => Number(text.slice(0, -1)) * UNIT_MS[text.slice(-1)]!);

const UNIT_BYTES: Record<string, number> = { '': 1, K: 1024, M: 1024 ** 2, G: 1024 ** 3 };
const Size = z
  .string()
  .regex(/^\d+([KMG]i?B?)?$/, 'expected a size like 64M, 512K or 1G')
  .transform((text) => {
    const [, digits, unit] = /^(\d+)([KMG]?)/.exec(text)!;
    return Number(digits) * UNIT_BYTES[unit ?? '']!;
  })
  .refine((bytes) => bytes >= 64 * 1024, "a log cap under 64K would cut an engine's last words");

const WeightsBudgetFlag = z
  .string()
  .regex(/^(\d+(\.\d+)?%|\d+([KMGT]i?B?)?)$/, 'expected a size like 500G or 2T, or a share of the disk like 80%')
  .transform((text): { percent: number } | { bytes: number } => {
    if (text.endsWith('%')) return { percent: Number(text.slice(0, -1)) };
    const [, digits, unit] = /^(\d+)([KMGT]?)/.exec(text)!;
    return { bytes: Number(digits) * { '': 1, K: 1024, M: 1024 ** 2, G: 1024 ** 3, T: 1024 ** 4 }[unit ?? '']! };
  })
  .refine(
    (budget) => !('percent' in budget) || (budget.percent > 0 && budget.percent <= 100),
    'a share of the disk is over 0% and at most 100%',
  );

const GpuList = z
  .string()
  .regex(/^\d+(,\d+)*$/, 'expected GPU indices like 0,1,2,3')
  .transform((text) => text.split(',').map(Number));

export const AgentFlags = z
  .object({
    nodeId: z
      .string()
      .regex(SAFE_NAME, `node ids must be ${SAFE_NAME_RULE} (one names the agent's task queue and state dir)`)
      .default(() => hostname()),
    stateDir: z.string().min(1).optional(),
    gpus: z.string().default('real'),
    sysfsRoot: z.string().default('/'),
    advertiseAddr: z.string().default('127.0.0.1'),
    /** `unix` (a 0600 socket in the state dir), `unix:/path`, or host:port (then a token is required). */
    adminAddr: z.string().min(1).default(DEFAULT_AGENT_ADMIN_ADDR),
    labels: Labels.default({}),
    managedGpus: GpuList.optional(),
    portRange: PortRange.default({ from: DEFAULT_PORTS.enginesFrom, to: DEFAULT_PORTS.enginesFrom + 999 }),
    /** Unset: 300 s where the server keeps worker heartbeats (they detect a dead agent), else 10 s (agent/host/presence.ts). */
    presenceHeartbeatSeconds: z.coerce.number().int().min(1).max(600).optional(),
    lostGraceSeconds: z.coerce.number().int().min(1).default(DEFAULT_LOST_GRACE_SECONDS),
    maxTemperatureC: z.coerce.number().default(85),
    /** The `ray` program (Ray launcher profiles): a path, or a name on PATH. */
    rayCommand: z.string().min(1, '--ray-command must not be empty').default('ray'),
    /**
     * Ports Ray's worker processes listen on. Ray's own default (10002-19999) covers the
     * default engine range, so an engine could find its port taken by a Ray worker; this
     * default ends below it, and a range that overlaps the engine ports is refused.
     */
    rayWorkerPorts: PortRange.default({ from: DEFAULT_PORTS.rayWorkersFrom, to: DEFAULT_PORTS.enginesFrom - 1 }),
    /** Each Ray shard's block of that range: every port its Ray processes listen on (engines/ray-ports.ts). */
    rayPortsPerShard: z.coerce.number().int().min(MIN_RAY_PORT_BLOCK).max(65535).default(DEFAULT_RAY_PORT_BLOCK),
    /** act: reconciliation carries out its plan; dry-run: it only shows it (a first rollout, a suspicious fleet). */
    reconcile: z.enum(['act', 'dry-run'], { error: 'use act or dry-run' }).default('act'),
    reconcileEverySeconds: z.coerce.number().int().min(0).default(3600),
    /** Tests: the node workflow hands over (continue-as-new) after this many history events. */
    nodeContinueAsNewAfterEvents: z.coerce.number().int().min(10).optional(),
    /** Tests: a node still NotReady after this agent registered again is asked again only this much later (default 30 s). */
    reregisterAfterSeconds: z.coerce.number().int().min(1).optional(),
    /**
     * Compute processes on managed GPUs that this agent did not start: report them (and keep
     * their GPUs out of placement), or kill them. Report by default: a host may run other jobs.
     */
    foreignGpuProcesses: z.enum(['report', 'kill'], { error: 'use report or kill' }).default('report'),
    /** The control worker's public key file (LLMGW_CATALOG_PUBLIC_KEY_FILE): only what it signed starts. */
    catalogKey: z.string().min(1, '--catalog-key must name a file').optional(),
    /**
     * The catalog private key file, to enroll this agent's own key at start (LLMGW_AGENT_ENROLL_KEY_FILE):
     * for `llmgw up` and tests, where one host holds it anyway. A real host is enrolled by the
     * operator (`llmgw nodes enroll`) and never holds the catalog private key.
     */
    enrollWithCatalogKey: z.string().min(1, '--enroll-with-catalog-key must name a file').optional(),
    /** Start revisions nobody signed: anyone who can start a workflow can then run anything here. */
    insecureUnsigned: z.boolean().default(false),
    /** Variables of the agent's environment every engine gets (HF_HOME, LD_LIBRARY_PATH, NCCL tuning, a token). */
    passEnv: EnvNames.default([]),
    /** Logs and corrupt specs of stopped shards are deleted once this old. */
    logRetention: Duration.default(7 * 86_400_000),
    /** A running shard's log beyond this is cut by copy-truncate, keeping the previous part as .1. */
    maxLogSize: Size.default(64 * 1024 ** 2),
    /** host:port of /metrics, or off; unset: LLMGW_METRICS_ADDR, else 127.0.0.1:9465 (temporal/connection.ts). */
    metricsAddr: z.string().min(1).optional(),
    /** NAME=value lines engines get only by reference ({fromHost: NAME} in the catalog): secrets. */
    envFile: z.string().min(1, '--env-file must name a file').optional(),
    /** The user engines run as (default llmgw-engine, else nobody; `root` for the agent's own). */
    engineUser: z.string().min(1, '--engine-user must name a user').optional(),
    /** One uid per shard from this range (root only): engines cannot read each other's environment or HOME. */
    engineUidRange: UidRange.optional(),
    /** The API key engines require (first line of this file); routers are given the same file. */
    engineKeyFile: z.string().min(1, '--engine-key-file must name a file').optional(),
    /** Engines serve HTTPS with a certificate this agent issues per start; routers pin it from the signed route. */
    engineTls: z.boolean().default(false),
    /** The host's weights cache, in the Hugging Face cache layout (default <state dir>/weights). */
    weightsDir: z.string().min(1, '--weights-dir must name a directory').optional(),
    /** How much of it weights may fill: a size (500G, 2T) or a share of its disk (80%). */
    weightsBudget: WeightsBudgetFlag.optional(),
    /** The nvidia-smi the GPU health watch asks while engines run, or off; unset: nvidia-smi on real GPUs, off when simulated. */
    gpuWatch: z.string().min(1, '--gpu-watch must name a program or be off').optional(),
    /** A file the kernel log reaches (kern.log): the GPU health watch reads Xid lines from it. */
    xidLog: z.string().min(1, '--xid-log must name a file').optional(),
    gpuWatchSeconds: z.coerce.number().min(0.5).default(10),
    /** Port claims shared by agents of one host (default <state dir>/port-claims). */
    portClaimsDir: z.string().min(1, '--port-claims-dir must name a directory').optional(),
  })
  .superRefine((flags, ctx) => {
    if (flags.catalogKey !== undefined && flags.insecureUnsigned) {
      ctx.addIssue({
        code: 'custom',
        path: ['insecureUnsigned'],
        message: 'give either a catalog key (verify every start) or --insecure-unsigned (verify nothing), not both',
      });
    }
    const { portRange: engines, rayWorkerPorts: ray } = flags;
    if (ray.from <= engines.to && engines.from <= ray.to) {
      ctx.addIssue({
        code: 'custom',
        path: ['rayWorkerPorts'],
        message: `${ray.from}-${ray.to} overlaps the engine ports ${engines.from}-${engines.to} (--port-range): give Ray a range of its own`,
      });
    }
  });

export type AgentConfig = Omit<z.output<typeof AgentFlags>, 'stateDir' | 'weightsDir'> & {
  stateDir: string;
  weightsDir: string;
  fakeEngineCommand: string[];
};

export function parseAgentFlags(flags: Record<string, unknown>): AgentConfig {
  // LLMGW_CATALOG_PUBLIC_KEY_FILE (else LLMGW_CATALOG_KEY_FILE) stands in for --catalog-key; an
  // explicit --insecure-unsigned wins over it. Agents hold the public keys only.
  const fromEnv = flags.insecureUnsigned
    ? undefined
    : process.env.LLMGW_CATALOG_PUBLIC_KEY_FILE || process.env.LLMGW_CATALOG_KEY_FILE || undefined;
  const enrollFromEnv = process.env.LLMGW_AGENT_ENROLL_KEY_FILE || undefined;
  const parsed = AgentFlags.safeParse({ catalogKey: fromEnv, enrollWithCatalogKey: enrollFromEnv, ...flags });
  if (!parsed.success) {
    const problems = parsed.error.issues.map((issue) => `--${kebab(String(issue.path[0] ?? ''))}: ${issue.message}`);
    throw new Error(`bad agent settings:\n  ${problems.join('\n  ')}`);
  }
  const value = parsed.data;
  return {
    ...value,
    stateDir: resolve(value.stateDir ?? `.llmgw/agents/${value.nodeId}`),
    weightsDir: resolve(value.weightsDir ?? join(value.stateDir ?? `.llmgw/agents/${value.nodeId}`, 'weights')),
    catalogKey: value.catalogKey === undefined ? undefined : resolve(value.catalogKey),
    enrollWithCatalogKey: value.enrollWithCatalogKey === undefined ? undefined : resolve(value.enrollWithCatalogKey),
    envFile: value.envFile === undefined ? undefined : resolve(value.envFile),
    engineKeyFile: value.engineKeyFile === undefined ? undefined : resolve(value.engineKeyFile),
    portClaimsDir: value.portClaimsDir === undefined ? undefined : resolve(value.portClaimsDir),
    // Engines of the `fake` kind are this same program; spawn it with the same Node.
    fakeEngineCommand: [process.execPath, resolve(__dirname, '../../bin/llmgw.js'), 'fake-engine'],
  };
}

function kebab(name: string): string {
  return name.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
}
