// Discovers a real GPU host for the agent: runs nvidia-smi (argument vectors, no shell)
// and reads sysfs, then builds the inventory. A broken driver yields zero GPUs and a problem, never a throw.
import { execFile } from 'node:child_process';
import { buildInventory, type DiscoveredHost } from './inventory.js';
import {
  QUERY_GPU_FIELDS,
  parseComputeApps,
  parseCudaVersion,
  parseDriverVersion,
  parseQueryGpu,
  parseTopology,
  type ComputeApp,
  type QueryGpuRow,
  type TopologyGpu,
} from './nvidia-smi.js';
import { readInfinibandHcas, readPciNumaNode } from './sysfs.js';

export interface NvidiaSmiResult {
  code: number;
  stdout: string;
  stderr: string;
}

export type RunNvidiaSmi = (args: string[]) => Promise<NvidiaSmiResult>;

export interface DiscoverOptions {
  sysfsRoot: string;
  fabricLabel?: string;
  maxTemperatureC?: number;
  /** Replaced in tests by one that serves recorded output. */
  runNvidiaSmi?: RunNvidiaSmi;
}

export const NVIDIA_SMI_TIMEOUT_MS = 10_000;

export const NVIDIA_SMI_ARGS = {
  queryGpu: [`--query-gpu=${QUERY_GPU_FIELDS.join(',')}`, '--format=csv,noheader,nounits'],
  topology: ['topo', '-m'],
  computeApps: ['--query-compute-apps=pid,gpu_uuid,used_memory', '--format=csv,noheader,nounits'],
  banner: [],
} as const satisfies Record<string, readonly string[]>;

/** Runs the nvidia-smi on PATH; a hung driver call is cut off rather than hanging the agent's start. */
export const runNvidiaSmi: RunNvidiaSmi = (args) =>
  new Promise((resolve, reject) => {
    execFile(
      'nvidia-smi',
      args,
      { timeout: NVIDIA_SMI_TIMEOUT_MS, maxBuffer: 16 * 1024 * 1024, encoding: 'utf8' },
      (error, stdout, stderr) => {
        if (!error) return resolve({ code: 0, stdout, stderr });
        const code = (error as NodeJS.ErrnoException).code;
        if (code === 'ENOENT') return reject(new Error('nvidia-smi not found on PATH (no NVIDIA driver installed?)'));
        if (error.killed) return reject(new Error(`nvidia-smi ${args.join(' ')} did not finish within ${NVIDIA_SMI_TIMEOUT_MS / 1000} s`));
        resolve({ code: typeof code === 'number' ? code : 1, stdout, stderr });
      },
    );
  });

type Outcome = { ok: true; stdout: string } | { ok: false; problem: string; stdout: string };

// `shown` names the call in problems; the full query-gpu field list would bury the message.
async function run(runner: RunNvidiaSmi, args: readonly string[], shown: string): Promise<Outcome> {
  try {
    const result = await runner([...args]);
    if (result.code === 0) return { ok: true, stdout: result.stdout };
    // The driver's complaint goes to stderr on some versions and stdout on others.
    const message = result.stderr.trim() || result.stdout.trim() || '(no output)';
    return { ok: false, problem: `${shown} failed (exit ${result.code}): ${message}`, stdout: result.stdout };
  } catch (error) {
    return { ok: false, problem: `${shown} could not run: ${error instanceof Error ? error.message : String(error)}`, stdout: '' };
  }
}

function attempt<T>(what: string, parse: () => T, problems: string[]): T | undefined {
  try {
    return parse();
  } catch (error) {
    problems.push(`${what}: ${error instanceof Error ? error.message : String(error)}`);
    return undefined;
  }
}

export async function discoverRealHost(opts: DiscoverOptions): Promise<DiscoveredHost> {
  const runner = opts.runNvidiaSmi ?? runNvidiaSmi;
  const problems: string[] = [];
  const hcas = await readInfinibandHcas(opts.sysfsRoot);
  const common = { hcas, fabricLabel: opts.fabricLabel, maxTemperatureC: opts.maxTemperatureC };

  const query = await run(runner, NVIDIA_SMI_ARGS.queryGpu, 'nvidia-smi --query-gpu');
  const rows: QueryGpuRow[] | undefined = query.ok
    ? attempt('GPU list unreadable', () => parseQueryGpu(query.stdout), problems)
    : undefined;
  if (!query.ok) problems.push(query.problem);
  if (rows === undefined || rows.length === 0) {
    // The host is still reported, with zero GPUs, so that an operator sees why.
    if (rows?.length === 0) problems.push('nvidia-smi lists no GPUs');
    const host = buildInventory({ ...common, rows: [] });
    return { ...host, problems: [...problems, ...host.problems] };
  }

  // The rest only refines the GPUs already found: a failure there is reported, not fatal.
  const [topo, apps, banner] = await Promise.all([
    run(runner, NVIDIA_SMI_ARGS.topology, 'nvidia-smi topo -m'),
    run(runner, NVIDIA_SMI_ARGS.computeApps, 'nvidia-smi --query-compute-apps'),
    run(runner, NVIDIA_SMI_ARGS.banner, 'nvidia-smi'),
  ]);
  let topology: TopologyGpu[] | undefined;
  if (topo.ok) topology = attempt('nvidia-smi topo -m unreadable', () => parseTopology(topo.stdout), problems);
  else problems.push(topo.problem);
  let computeApps: ComputeApp[] | undefined;
  if (apps.ok) computeApps = attempt('compute processes unreadable', () => parseComputeApps(apps.stdout), problems);
  else problems.push(`${apps.problem}; processes on the GPUs are unknown`);
  // The banner matters only for the CUDA version; it may print a usable header and still exit non-zero.
  const bannerText = banner.stdout;

  const pciNumaNodes: Record<string, number> = {};
  for (const row of rows) {
    if (topology?.find((t) => t.index === row.index)?.numaAffinity !== undefined) continue;
    const node = await readPciNumaNode(opts.sysfsRoot, row.pciBusId);
    if (node !== undefined) pciNumaNodes[row.pciBusId] = node;
  }

  const host = buildInventory({
    ...common,
    rows,
    topology,
    pciNumaNodes,
    computeApps,
    cudaVersion: parseCudaVersion(bannerText),
    driverVersion: parseDriverVersion(bannerText),
  });
  return { ...host, problems: [...problems, ...host.problems] };
}
