// `llmgw sim-fleet` flags, validated in one place, and each simulated host's agent settings
// derived from them (the same AgentConfig `llmgw agent` parses). Simulated-fleet side.
import { join, resolve } from 'node:path';
import { z } from 'zod';
import { parseAgentFlags, type AgentConfig } from '../agent/config.js';

export const SimFleetFlags = z
  .object({
    hosts: z.coerce.number().int().min(1).max(2000),
    gpus: z.string().min(1).default('builtin:h100x8'),
    /** Fabric labels given to the hosts in turn (gang placement needs hosts of one fabric). */
    fabrics: z
      .string()
      .regex(/^[A-Za-z0-9._-]+(,[A-Za-z0-9._-]+)*$/, 'expected fabric names like ib-a,ib-b')
      .transform((text) => text.split(','))
      .optional(),
    stateDir: z.string().min(1).default('.llmgw/sim-fleet'),
    nodePrefix: z
      .string()
      .regex(/^[A-Za-z0-9][A-Za-z0-9._-]*$/, 'node ids are letters, digits, ".", "_" and "-"')
      .default('sim-'),
    controlSocket: z.string().min(1).optional(),
    /** Host i gets engine ports portBase + i·portsPerHost and up. */
    portBase: z.coerce.number().int().min(1024).max(65000).default(20000),
    portsPerHost: z.coerce.number().int().min(2).max(1000).default(10),
    /** How many hosts start at once (each connects, recovers, creates its worker). */
    startConcurrency: z.coerce.number().int().min(1).max(500).default(16),
    /** Activity pollers per host worker: a host gets few tasks, and hundreds of pollers each would crowd the server. */
    activityPollers: z.coerce.number().int().min(1).max(100).default(2),
    presenceHeartbeatSeconds: z.string().optional(),
    lostGraceSeconds: z.string().optional(),
    reconcileEverySeconds: z.string().optional(),
    catalogKey: z.string().optional(),
    insecureUnsigned: z.boolean().optional(),
    /** One /metrics for the whole fleet (every host's metrics carry llmgw_node); off by default. */
    metricsAddr: z.string().optional(),
  })
  .superRefine((flags, ctx) => {
    const last = flags.portBase + flags.hosts * flags.portsPerHost - 1;
    if (last > 65535) ctx.addIssue({ code: 'custom', path: ['portBase'], message: `${flags.hosts} hosts need ports up to ${last}` });
  });
export type SimFleetFlags = z.output<typeof SimFleetFlags>;

export interface SimFleetSettings extends SimFleetFlags {
  stateDir: string;
  controlSocket: string;
  enginesSocket: string;
  nodeIds: string[];
}

export function parseSimFleetFlags(flags: Record<string, unknown>): SimFleetSettings {
  const parsed = SimFleetFlags.safeParse(flags);
  if (!parsed.success) {
    const problems = parsed.error.issues.map((issue) => `--${kebab(String(issue.path[0] ?? ''))}: ${issue.message}`);
    throw new Error(`bad sim-fleet settings:\n  ${problems.join('\n  ')}`);
  }
  const value = parsed.data;
  const stateDir = resolve(value.stateDir);
  return {
    ...value,
    stateDir,
    controlSocket: resolve(value.controlSocket ?? join(stateDir, 'control.sock')),
    enginesSocket: join(stateDir, 'engines.sock'),
    nodeIds: Array.from({ length: value.hosts }, (_, i) => `${value.nodePrefix}${i}`),
  };
}

/** Host `index`'s agent, as `llmgw agent` would be started for it. */
export function hostConfig(settings: SimFleetSettings, index: number): AgentConfig {
  const nodeId = settings.nodeIds[index]!;
  const from = settings.portBase + index * settings.portsPerHost;
  const fabric = settings.fabrics?.[index % settings.fabrics.length];
  const passed = Object.fromEntries(
    (['presenceHeartbeatSeconds', 'lostGraceSeconds', 'reconcileEverySeconds', 'catalogKey', 'insecureUnsigned'] as const)
      .filter((key) => settings[key] !== undefined)
      .map((key) => [key, settings[key]]),
  );
  return parseAgentFlags({
    ...passed,
    nodeId,
    gpus: settings.gpus,
    stateDir: join(settings.stateDir, 'hosts', nodeId),
    adminAddr: '127.0.0.1:0',
    portRange: `${from}-${from + settings.portsPerHost - 1}`,
    metricsAddr: 'off',
    ...(fabric ? { labels: `fabric=${fabric}` } : {}),
  });
}

function kebab(name: string): string {
  return name.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
}
