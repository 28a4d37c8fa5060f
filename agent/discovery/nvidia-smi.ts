// Parsers for what nvidia-smi prints, on the agent's side: the GPU query CSV, the
// compute-apps CSV, the banner's CUDA version and the `topo -m` matrix. Pure text in, records out.

/** One line of `--query-gpu=index,uuid,name,memory.total,memory.used,compute_cap,pci.bus_id,driver_version,temperature.gpu,ecc.errors.uncorrected.volatile.total`. */
export interface QueryGpuRow {
  index: number;
  uuid: string;
  name: string;
  memoryTotalMib: number;
  memoryUsedMib: number;
  /** "9.0"; empty when the card does not say. */
  computeCapability: string;
  /** As nvidia-smi prints it: 00000000:18:00.0. */
  pciBusId: string;
  driverVersion: string;
  temperatureC?: number;
  /** Undefined when the card does not report ECC ([N/A]), which is not the same as 0. */
  uncorrectedEcc?: number;
}

export const QUERY_GPU_FIELDS = [
  'index',
  'uuid',
  'name',
  'memory.total',
  'memory.used',
  'compute_cap',
  'pci.bus_id',
  'driver_version',
  'temperature.gpu',
  'ecc.errors.uncorrected.volatile.total',
] as const;

export interface ComputeApp {
  pid: number;
  gpuUuid: string;
  /** 0 where nvidia-smi cannot say ([N/A]): the pid and the GPU it holds are what matter. */
  usedMemoryMib: number;
}

/** A GPU's PCIe distance to a NIC, closest first, as the `topo -m` legend defines them. */
export type PcieRelation = 'PIX' | 'PXB' | 'PHB' | 'NODE' | 'SYS';

export interface TopologyGpu {
  index: number;
  nvlinkPeers: { index: number; links: number }[];
  /** "0-55,112-167"; undefined when nvidia-smi says N/A. */
  cpuAffinity?: string;
  numaAffinity?: number;
  /** Every NIC/HCA column of the matrix, named through the NIC legend. */
  nics: { name: string; relation: PcieRelation }[];
}

// nvidia-smi writes "[N/A]", "[Not Supported]", "[Unknown Error]" (and bare "N/A" in
// places) for values a card does not report; all of them mean "no value".
function isUnreported(value: string): boolean {
  return value === '' || value === 'N/A' || /^\[.*\]$/.test(value);
}

function csvFields(line: string): string[] {
  // GPU names and uuids carry no commas, so a plain split is exact.
  return line.split(',').map((field) => field.trim());
}

function dataLines(text: string): string[] {
  return text
    .split(/\r?\n/)
    .map((line) => line.trim())
    .filter((line) => line !== '');
}

function requiredInt(value: string | undefined, what: string, line: string): number {
  // Tolerates a unit left in ("81559 MiB") in case `nounits` is ever dropped.
  const match = value === undefined ? null : /^(-?\d+)(\s*[A-Za-z]+)?$/.exec(value);
  if (!match?.[1]) throw new Error(`nvidia-smi: cannot read ${what} from ${JSON.stringify(value ?? '')} in line ${JSON.stringify(line)}`);
  return Number(match[1]);
}

function optionalInt(value: string | undefined, what: string, line: string): number | undefined {
  if (value === undefined || isUnreported(value)) return undefined;
  return requiredInt(value, what, line);
}

function optionalText(value: string | undefined): string {
  return value === undefined || isUnreported(value) ? '' : value;
}

/**
 * Parses the `--format=csv,noheader,nounits` GPU query. Throws on a line that is not
 * a GPU row: silently dropping one would hide a GPU from the control plane.
 */
export function parseQueryGpu(csv: string): QueryGpuRow[] {
  return dataLines(csv).map((line) => {
    const f = csvFields(line);
    if (f.length < QUERY_GPU_FIELDS.length) {
      throw new Error(`nvidia-smi: expected ${QUERY_GPU_FIELDS.length} fields, got ${f.length} in line ${JSON.stringify(line)}`);
    }
    const row: QueryGpuRow = {
      index: requiredInt(f[0], 'index', line),
      uuid: optionalText(f[1]),
      name: optionalText(f[2]),
      memoryTotalMib: optionalInt(f[3], 'memory.total', line) ?? 0,
      memoryUsedMib: optionalInt(f[4], 'memory.used', line) ?? 0,
      computeCapability: optionalText(f[5]),
      pciBusId: optionalText(f[6]),
      driverVersion: optionalText(f[7]),
    };
    const temperatureC = optionalInt(f[8], 'temperature.gpu', line);
    if (temperatureC !== undefined) row.temperatureC = temperatureC;
    const uncorrectedEcc = optionalInt(f[9], 'ecc.errors.uncorrected.volatile.total', line);
    if (uncorrectedEcc !== undefined) row.uncorrectedEcc = uncorrectedEcc;
    return row;
  });
}

/** Parses `--query-compute-apps=pid,gpu_uuid,used_memory --format=csv,noheader,nounits`. */
export function parseComputeApps(csv: string): ComputeApp[] {
  return dataLines(csv)
    .filter((line) => !/^No running processes found/i.test(line))
    .map((line) => {
      const f = csvFields(line);
      if (f.length < 3) throw new Error(`nvidia-smi: expected pid, gpu_uuid, used_memory in line ${JSON.stringify(line)}`);
      return {
        pid: requiredInt(f[0], 'pid', line),
        gpuUuid: f[1] ?? '',
        usedMemoryMib: optionalInt(f[2], 'used_memory', line) ?? 0,
      };
    });
}

/** The "CUDA Version: 12.4" of plain `nvidia-smi`'s banner: the newest CUDA the driver supports. */
export function parseCudaVersion(nvidiaSmiHeader: string): string | undefined {
  return /CUDA Version:\s*([0-9][0-9.]*)/.exec(nvidiaSmiHeader)?.[1];
}

export function parseDriverVersion(nvidiaSmiHeader: string): string | undefined {
  return /Driver Version:\s*([0-9][0-9.]*)/.exec(nvidiaSmiHeader)?.[1];
}

function pcieRelation(cell: string, where: string): PcieRelation {
  switch (cell) {
    case 'PIX':
    case 'PXB':
    case 'PHB':
    case 'NODE':
    case 'SYS':
      return cell;
    // Drivers before the NODE/SYS split printed SOC for a path across sockets.
    case 'SOC':
      return 'SYS';
    default:
      throw new Error(`nvidia-smi topo -m: unknown relation ${JSON.stringify(cell)} at ${where}`);
  }
}

const TRAILING_COLUMNS = /CPU Affinity|NUMA Affinity|GPU NUMA ID/g;

function stripAnsi(text: string): string {
  // topo -m underlines its header with escape codes even when writing to a pipe.
  // eslint-disable-next-line no-control-regex
  return text.replace(/\x1b\[[0-9;]*m/g, '');
}

/**
 * Parses `nvidia-smi topo -m`. Cells are split on any run of whitespace, which makes
 * tabs, aligned spaces and the empty column some drivers print before `GPU NUMA ID`
 * all read the same; the affinity cells never contain spaces.
 */
export function parseTopology(topoM: string): TopologyGpu[] {
  const lines = stripAnsi(topoM).split(/\r?\n/);
  const headerAt = lines.findIndex((line) => line.trim() !== '');
  if (headerAt < 0) return [];
  if (!/(^|\s)GPU0(\s|$)/.test(lines[headerAt] ?? '')) {
    throw new Error(`nvidia-smi topo -m: expected a header row starting with GPU0, got ${JSON.stringify(lines[headerAt])}`);
  }
  const header = lines[headerAt] ?? '';
  const trailingFrom = header.search(TRAILING_COLUMNS);
  const columns = (trailingFrom < 0 ? header : header.slice(0, trailingFrom)).trim().split(/\s+/);
  const trailing = trailingFrom < 0 ? [] : [...header.slice(trailingFrom).matchAll(TRAILING_COLUMNS)].map((m) => m[0]);

  const nicNames = parseNicLegend(lines);
  const gpus: TopologyGpu[] = [];
  for (const line of lines.slice(headerAt + 1)) {
    const cells = line.trim().split(/\s+/);
    const label = cells[0] ?? '';
    if (label === '' || label === 'Legend:') break;
    const gpuMatch = /^GPU(\d+)$/.exec(label);
    if (!gpuMatch?.[1]) continue; // NIC rows repeat what the GPU rows already say.
    const index = Number(gpuMatch[1]);
    const gpu: TopologyGpu = { index, nvlinkPeers: [], nics: [] };
    columns.forEach((column, i) => {
      const cell = cells[i + 1];
      const where = `${label}/${column}`;
      if (cell === undefined) throw new Error(`nvidia-smi topo -m: row ${label} has no cell for ${column}`);
      if (cell === 'X') return;
      const peer = /^GPU(\d+)$/.exec(column);
      if (peer?.[1]) {
        const nvlink = /^NV(\d+)$/.exec(cell);
        if (nvlink?.[1]) gpu.nvlinkPeers.push({ index: Number(peer[1]), links: Number(nvlink[1]) });
        return;
      }
      gpu.nics.push({ name: nicNames.get(column) ?? column, relation: pcieRelation(cell, where) });
    });
    const rest = cells.slice(columns.length + 1);
    trailing.forEach((column, i) => {
      const value = rest[i];
      if (value === undefined || isUnreported(value)) return;
      if (column === 'CPU Affinity') gpu.cpuAffinity = value;
      // A range ("0-1") is not one node; treat it as unknown rather than pick one.
      if (column === 'NUMA Affinity' && /^\d+$/.test(value)) gpu.numaAffinity = Number(value);
    });
    gpus.push(gpu);
  }
  return gpus.sort((a, b) => a.index - b.index);
}

function parseNicLegend(lines: string[]): Map<string, string> {
  const names = new Map<string, string>();
  const from = lines.findIndex((line) => /^\s*NIC Legend:/.test(line));
  if (from < 0) return names;
  for (const line of lines.slice(from + 1)) {
    const match = /^\s*(NIC\d+):\s*(\S+)/.exec(line);
    if (match?.[1] && match[2]) names.set(match[1], match[2]);
  }
  return names;
}
