// The agent's watch over its GPUs while engines run: every few seconds it asks nvidia-smi
// (--gpu-watch) and reads what the kernel logged since the last look (--xid-log), and judges
// (discovery/gpu-faults.ts). A GPU found lost is held out until an operator clears it: its
// fault is kept in the state dir (a restarted agent must not hand it out again), shown as the
// GPU's problem in every report (placement never hands out a GPU with a problem), engines on
// it are stopped, and a start on it is refused so that its replica is placed elsewhere.
// Agent side.
import { execFile } from 'node:child_process';
import { existsSync, openSync, readFileSync, readSync, closeSync, fstatSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { clone, create } from '@bufbuild/protobuf';
import { GPUSchema, GpuHealthSchema } from '../proto/gen/llmgw/v1/gpu_pb.js';
import { RegisterSchema, type Register } from '../proto/gen/llmgw/v1/register_pb.js';
import { judgeGpuFaults, parseXidLines, type GpuFault, type WatchedGpu } from './discovery/gpu-faults.js';
import { parseQueryGpu, QUERY_GPU_FIELDS } from './discovery/nvidia-smi.js';
import { ShardState, ShardStatusSchema, StopShardSchema, type ShardStatus } from '../proto/gen/llmgw/v1/shard_pb.js';
import type { DiscoveredHost } from './discovery/inventory.js';
import type { AgentConfig } from './config.js';
import type { Supervisor } from './supervisor/supervisor.js';

const execFileAsync = promisify(execFile);
const FAULTS_FILE = 'gpu-faults.json';

export interface HeldOutGpu extends GpuFault {
  since: string;
}

export interface GpuHealthOptions {
  nodeId: string;
  stateDir: string;
  /** The nvidia-smi to ask; undefined: no query (only the Xid log, if any). */
  command?: string;
  /** A file the kernel log reaches (a log forwarder's kern.log): read from its end at start. */
  xidLog?: string;
  everyMs: number;
  watched: WatchedGpu[];
  /** New faults, once each: stop what runs there and report again. */
  onFaults(faults: HeldOutGpu[]): void;
  log(line: string, level?: 'info' | 'warn'): void;
}

export interface GpuHealth {
  heldOut(): HeldOutGpu[];
  /** Why a start on these GPUs is refused, or undefined. */
  refusal(gpuIndices: number[]): string | undefined;
  /** An operator's word that the GPU is sound again (a reset, a replaced card). */
  clear(index: number): boolean;
  /** The report with each held-out GPU's fault as its problem. */
  withFaults(register: Register): Register;
  stop(): void;
}

export function startGpuHealth(options: GpuHealthOptions): GpuHealth {
  const file = join(options.stateDir, FAULTS_FILE);
  let held: HeldOutGpu[] = existsSync(file) ? (JSON.parse(readFileSync(file, 'utf8')) as HeldOutGpu[]) : [];
  const save = (): void => {
    writeFileSync(`${file}.tmp`, JSON.stringify(held, null, 2));
    renameSync(`${file}.tmp`, file);
  };
  const readNewKernelLines = kernelLogTail(options.xidLog);
  let running = false;

  const look = async (): Promise<void> => {
    if (running) return;
    running = true;
    try {
      const rows = await queryGpus(options);
      const found = judgeGpuFaults(options.watched, rows, parseXidLines(readNewKernelLines()));
      const fresh = found
        .filter((fault) => !held.some((h) => h.index === fault.index))
        .map((fault) => ({ ...fault, since: new Date().toISOString() }));
      if (!fresh.length) return;
      held = [...held, ...fresh].sort((a, b) => a.index - b.index);
      save();
      for (const fault of fresh) options.log(`GPU ${fault.index} held out: ${fault.reason}`, 'warn');
      options.onFaults(fresh);
    } finally {
      running = false;
    }
  };
  const timer = setInterval(() => void look(), options.everyMs);
  timer.unref();

  return {
    heldOut: () => [...held],
    refusal(gpuIndices) {
      const bad = held.filter((h) => gpuIndices.includes(h.index));
      return bad.length
        ? `GPU ${bad.map((b) => `${b.index} is held out (${b.reason})`).join(', ')} on ${options.nodeId}: place elsewhere; \`llmgw nodes clear-gpu ${options.nodeId} ${bad[0]!.index}\` returns it`
        : undefined;
    },
    clear(index) {
      const before = held.length;
      held = held.filter((h) => h.index !== index);
      if (held.length === before) return false;
      save();
      options.log(`GPU ${index} returned to placement by an operator`);
      return true;
    },
    withFaults: (register) => withHeldOut(register, held, options.nodeId),
    stop: () => clearInterval(timer),
  };
}

/** nvidia-smi's rows for the watched fields; undefined when there is no command or it did not answer. */
async function queryGpus(options: GpuHealthOptions): Promise<ReturnType<typeof parseQueryGpu> | undefined> {
  if (!options.command) return undefined;
  try {
    const args = [`--query-gpu=${QUERY_GPU_FIELDS.join(',')}`, '--format=csv,noheader,nounits'];
    const { stdout } = await execFileAsync(options.command, args, { timeout: 15_000 });
    return parseQueryGpu(stdout);
  } catch (error) {
    options.log(`GPU watch: ${options.command} did not answer: ${error instanceof Error ? error.message : String(error)}`, 'warn');
    return undefined;
  }
}

/** Reads what the kernel log gained since the last call (from its end at start; from 0 after a rotation). */
function kernelLogTail(path: string | undefined): () => string {
  let offset = path && existsSync(path) ? fstatSizeOf(path) : 0;
  return () => {
    if (!path || !existsSync(path)) return '';
    const fd = openSync(path, 'r');
    try {
      const size = fstatSync(fd).size;
      if (size < offset) offset = 0; // rotated
      const buffer = Buffer.alloc(size - offset);
      readSync(fd, buffer, 0, buffer.length, offset);
      offset = size;
      return buffer.toString('utf8');
    } finally {
      closeSync(fd);
    }
  };
}

/** The report with each held-out GPU's fault as its problem. */
function withHeldOut(register: Register, held: HeldOutGpu[], nodeId: string): Register {
  if (!held.length) return register;
  const copy = clone(RegisterSchema, register);
  copy.gpus = copy.gpus.map((gpu) => {
    const fault = held.find((h) => h.index === gpu.index);
    if (!fault) return gpu;
    const marked = clone(GPUSchema, gpu);
    const health = marked.health ?? create(GpuHealthSchema, {});
    health.problems.push(`held out since ${fault.since}: ${fault.reason} (llmgw nodes clear-gpu ${nodeId} ${gpu.index} returns it)`);
    marked.health = health;
    return marked;
  });
  return copy;
}

function fstatSizeOf(path: string): number {
  const fd = openSync(path, 'r');
  try {
    return fstatSync(fd).size;
  } finally {
    closeSync(fd);
  }
}

/**
 * The agent's GPU health watch as its flags ask (--gpu-watch, --xid-log): engines on a GPU found
 * lost are stopped (their replicas restart, are refused this GPU, and are placed elsewhere) and
 * the host reports again, so that the node shows the GPU held out at once.
 */
export function startAgentGpuHealth(
  config: AgentConfig,
  host: DiscoveredHost,
  supervisor: Supervisor,
  reportAgain: () => void,
  /** Tells the replica (a transition): a stop the replica did not ask for must reach it. */
  tell: (status: ShardStatus) => void,
  log: (line: string, level?: 'info' | 'warn') => void,
): GpuHealth {
  const watch = config.gpuWatch ?? (config.gpus === 'real' ? 'nvidia-smi' : 'off');
  const managed = config.managedGpus ?? host.gpus.map((gpu) => gpu.index);
  return startGpuHealth({
    nodeId: config.nodeId,
    stateDir: config.stateDir,
    ...(watch !== 'off' ? { command: watch } : {}),
    ...(config.xidLog ? { xidLog: config.xidLog } : {}),
    everyMs: config.gpuWatchSeconds * 1000,
    watched: host.gpus.filter((gpu) => managed.includes(gpu.index)).map((gpu) => ({ index: gpu.index, pciBusId: gpu.pciBusId })),
    log,
    onFaults(faults) {
      for (const running of supervisor.list()) {
        const spec = running.spec;
        const fault = faults.find((f) => spec?.gpuIndices.includes(f.index));
        if (!spec || !fault) continue;
        const reason = `GPU ${fault.index} lost: ${fault.reason}`;
        log(`stopping shard ${spec.shardId}: ${reason}`, 'warn');
        // FAILED, not STOPPED: the replica restarts, its start here is refused, and it is
        // placed elsewhere.
        const status = running.status;
        tell(
          create(ShardStatusSchema, {
            shardId: spec.shardId,
            replicaId: spec.replicaId,
            nodeId: config.nodeId,
            state: ShardState.FAILED,
            pid: status?.pid ?? 0,
            rank: status?.rank ?? 0,
            gpuIndices: [...spec.gpuIndices],
            message: reason,
          }),
        );
        void supervisor
          .stop(create(StopShardSchema, { shardId: spec.shardId, replicaId: spec.replicaId, graceSeconds: 5, reason }))
          .catch((error: unknown) => log(`could not stop shard ${spec.shardId}: ${String(error)}`, 'warn'));
      }
      reportAgain();
    },
  });
}
