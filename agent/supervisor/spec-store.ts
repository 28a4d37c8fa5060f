// The agent's state dir: one spec record per shard, written atomically before anything is
// spawned, so that an agent restarted after any crash can tell its own engines from strangers.
// Agent side. Layout: <stateDir>/shards/<shardId>.json and <stateDir>/logs/<shardId>.log.
import {
  chmodSync,
  closeSync,
  copyFileSync,
  fsyncSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  unlinkSync,
  writeSync,
} from 'node:fs';
import { join } from 'node:path';
import { fromJson, toJson, type JsonValue } from '@bufbuild/protobuf';
import { ApplicationFailure } from '@temporalio/common';
import { z } from 'zod';
import { FailureType } from '../../common/failures.js';
import { StartShardSchema, type StartShard } from '../../proto/gen/llmgw/v1/shard_pb.js';
import type { ProcessRole } from '../engines/types.js';
import { removeEngineConfig } from './start/engine-key.js';
import { removeEngineTls } from './start/engine-tls.js';

const ProcessRoleSchema = z.enum(['engine', 'ray-head', 'ray-worker']);
// Fails to compile when a role is added to the engines' ProcessRole but not here.
type RolesMatch = [ProcessRole] extends [z.infer<typeof ProcessRoleSchema>]
  ? [z.infer<typeof ProcessRoleSchema>] extends [ProcessRole]
    ? true
    : never
  : never;
const rolesMatch: RolesMatch = true;
void rolesMatch;

const RecordedProcess = z.object({
  role: ProcessRoleSchema,
  pid: z.number().int().min(2),
  /** With the pid, identifies the process across pid reuse (see proc.ts isSameProcess). */
  startTicks: z.string().regex(/^\d*$/),
  pgid: z.number().int().min(2),
});
export type RecordedProcess = z.infer<typeof RecordedProcess>;

/** What the launch looked like, so that a later agent need not rebuild it to watch the shard. */
const LaunchSummary = z.object({
  roles: z.array(ProcessRoleSchema).min(1),
  servesHttp: z.boolean(),
  healthPath: z.string(),
});
export type LaunchSummary = z.infer<typeof LaunchSummary>;

// The file is a trust boundary of sorts: a crash, a full disk or a human can leave anything
// in it, and a record we misread could have us adopt or kill the wrong process.
const ShardRecordFile = z.object({
  version: z.literal(1),
  spec: z.record(z.string(), z.unknown()),
  httpPort: z.number().int().min(0).max(65535),
  launch: LaunchSummary,
  processes: z.array(RecordedProcess),
  startedAt: z.string(),
  adoptedAt: z.string().optional(),
  uid: z.number().int().min(1000).optional(),
  rayPorts: z
    .object({ from: z.number().int().min(1024).max(65535), to: z.number().int().min(1024).max(65535) })
    .refine((span) => span.from <= span.to, 'rayPorts: from must not be above to')
    .optional(),
  tlsFingerprint: z
    .string()
    .regex(/^[0-9a-f]{64}$/)
    .optional(),
});

export interface ShardRecord {
  version: 1;
  spec: StartShard;
  /** The port the engine was given (0 for ranks that serve no HTTP). */
  httpPort: number;
  launch: LaunchSummary;
  /** In spawn order; empty until the first spawn, then rewritten after each. */
  processes: RecordedProcess[];
  startedAt: string;
  adoptedAt?: string;
  /**
   * The uid this shard's processes run as (--engine-uid-range): kept for the shard's life, by
   * later agents too, and given to no other shard while this record exists.
   */
  uid?: number;
  /**
   * A Ray shard's block of ports (start/ports.ts chooseRayPorts): every port its Ray processes
   * listen on, which the firewall guards, and later agents too, from this record.
   */
  rayPorts?: { from: number; to: number };
  /**
   * The pin (SHA-256 of the certificate) of the HTTPS its engine serves (--engine-tls,
   * start/engine-tls.ts): health checks and the endpoint attestation read it, later agents too.
   */
  tlsFingerprint?: string;
}

export interface UnreadableRecord {
  shardId: string;
  file: string;
  error: string;
}

export function shardsDir(stateDir: string): string {
  return join(stateDir, 'shards');
}

export function logsDir(stateDir: string): string {
  return join(stateDir, 'logs');
}

export function recordPath(stateDir: string, shardId: string): string {
  return join(shardsDir(stateDir), `${shardId}.json`);
}

export function logPath(stateDir: string, shardId: string): string {
  return join(logsDir(stateDir), `${shardId}.log`);
}

function fsyncDir(dir: string): void {
  const fd = openSync(dir, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/**
 * Write, fsync, rename, fsync the directory: after a crash at any point the file holds
 * either the old record or the new one, never a torn mix.
 */
export function writeRecordAtomic(stateDir: string, record: ShardRecord): void {
  const dir = shardsDir(stateDir);
  const file = recordPath(stateDir, record.spec.shardId);
  const tmp = `${file}.tmp-${process.pid}`;
  const body: Record<string, JsonValue> = {
    version: record.version,
    spec: toJson(StartShardSchema, record.spec),
    httpPort: record.httpPort,
    launch: { roles: record.launch.roles, servesHttp: record.launch.servesHttp, healthPath: record.launch.healthPath },
    processes: record.processes.map((p) => ({ role: p.role, pid: p.pid, startTicks: p.startTicks, pgid: p.pgid })),
    startedAt: record.startedAt,
  };
  if (record.adoptedAt !== undefined) body.adoptedAt = record.adoptedAt;
  if (record.uid !== undefined) body.uid = record.uid;
  if (record.rayPorts !== undefined) body.rayPorts = { from: record.rayPorts.from, to: record.rayPorts.to };
  if (record.tlsFingerprint !== undefined) body.tlsFingerprint = record.tlsFingerprint;
  // 0600: a spec names no secret's value, but it is the agent's business alone.
  const fd = openSync(tmp, 'w', 0o600);
  try {
    writeSync(fd, `${JSON.stringify(body, null, 2)}\n`);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, file);
  fsyncDir(dir);
}

function errorText(err: unknown): string {
  if (err instanceof z.ZodError) {
    return err.issues.map((i) => `${i.path.length ? i.path.join('.') : '(root)'}: ${i.message}`).join('; ');
  }
  return err instanceof Error ? err.message : String(err);
}

export function parseRecord(text: string, expectedShardId: string): ShardRecord {
  const file = ShardRecordFile.parse(JSON.parse(text));
  const spec = fromJson(StartShardSchema, file.spec as JsonValue);
  if (spec.shardId !== expectedShardId) {
    throw new Error(`the spec names shard "${spec.shardId}" but the file is named for "${expectedShardId}"`);
  }
  const record: ShardRecord = {
    version: 1,
    spec,
    httpPort: file.httpPort,
    launch: file.launch,
    processes: file.processes,
    startedAt: file.startedAt,
  };
  if (file.adoptedAt !== undefined) record.adoptedAt = file.adoptedAt;
  if (file.uid !== undefined) record.uid = file.uid;
  if (file.rayPorts !== undefined) record.rayPorts = file.rayPorts;
  if (file.tlsFingerprint !== undefined) record.tlsFingerprint = file.tlsFingerprint;
  return record;
}

/** Every record in the state dir; a file that cannot be read is reported, never thrown. */
export function readAllRecords(stateDir: string): { records: ShardRecord[]; unreadable: UnreadableRecord[] } {
  const dir = shardsDir(stateDir);
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { records: [], unreadable: [] };
    throw err;
  }
  const records: ShardRecord[] = [];
  const unreadable: UnreadableRecord[] = [];
  for (const name of names.sort()) {
    if (!name.endsWith('.json')) continue;
    const shardId = name.slice(0, -'.json'.length);
    const file = join(dir, name);
    try {
      records.push(parseRecord(readFileSync(file, 'utf8'), shardId));
    } catch (err) {
      unreadable.push({ shardId, file, error: errorText(err) });
    }
  }
  return { records, unreadable };
}

export function removeRecord(stateDir: string, shardId: string): void {
  // The engine's config file (its key, for SGLang) goes with the record that explains it.
  removeEngineConfig(stateDir, shardId);
  removeEngineTls(stateDir, shardId);
  rmSync(recordPath(stateDir, shardId), { force: true });
  fsyncDir(shardsDir(stateDir));
}

/** Keeps a corrupted record as `<file>.corrupt` for a human, and takes it out of the way. */
export function setAsideCorrupt(file: string): string {
  const kept = `${file}.corrupt`;
  copyFileSync(file, kept);
  unlinkSync(file);
  return kept;
}

/** Temp files of writes a crash interrupted: never a record, by construction. */
export function removeStaleTempFiles(stateDir: string): string[] {
  const dir = shardsDir(stateDir);
  const removed: string[] = [];
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return removed;
  }
  for (const name of names) {
    if (!/\.json\.tmp-\d+$/.test(name)) continue;
    rmSync(join(dir, name), { force: true });
    removed.push(name);
  }
  return removed;
}

/**
 * Creates the dirs (0700: specs and engine logs are the agent's alone; older agents' dirs are
 * tightened) and proves a file can be written and synced. Without that no spec can be
 * recorded, and an engine started without one would be killed as a stranger after a restart.
 */
export function checkStateDirWritable(stateDir: string): void {
  let path = stateDir;
  try {
    // The state dir itself may be passed through (0711) by the engine user, to reach the
    // weights cache under it (agent/weights/); what is ours alone stays 0700 below it.
    for (const [dir, mode] of [
      [stateDir, 0o711],
      [shardsDir(stateDir), 0o700],
      [logsDir(stateDir), 0o700],
    ] as const) {
      path = dir;
      mkdirSync(dir, { recursive: true, mode });
      chmodSync(dir, mode);
    }
    path = join(shardsDir(stateDir), `.probe-${process.pid}`);
    const fd = openSync(path, 'w', 0o600);
    try {
      writeSync(fd, 'probe\n');
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    unlinkSync(path);
  } catch (err) {
    throw ApplicationFailure.nonRetryable(
      `the agent's state dir ${stateDir} is not writable (${path}: ${errorText(err)}); no engine can be started until it is`,
      FailureType.StateDirUnwritable,
    );
  }
}
