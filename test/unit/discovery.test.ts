// Guards the agent's host discovery: what it reports about each fixture host (nvidia-smi
// output and a sysfs tree as real hosts print them), and simulated inventories checked by the same code.
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { BUILTIN_INVENTORIES } from '../../agent/discovery/builtin-inventories.js';
import { discoverRealHost, type RunNvidiaSmi } from '../../agent/discovery/discover.js';
import { gpuProblems } from '../../agent/discovery/health.js';
import { gpuClassFromName } from '../../agent/discovery/inventory.js';
import { parseQueryGpu, parseTopology } from '../../agent/discovery/nvidia-smi.js';
import { SimulatedInventory, loadSimulatedInventory } from '../../agent/discovery/simulated.js';
import { readInfinibandHcas, readPciNumaNode } from '../../agent/discovery/sysfs.js';

const repoRoot = resolve(__dirname, '..', '..');

// The fixtures are shared between checkouts; LLMGW_FIXTURES points elsewhere when needed.
const FIXTURES = [
  process.env.LLMGW_FIXTURES,
  join(repoRoot, 'test', 'fixtures'),
  join(repoRoot, 'shared', 'fixtures'),
  join(repoRoot, '..', 'shared', 'fixtures'),
].find((dir): dir is string => dir !== undefined && existsSync(join(dir, 'nvidia-smi')));
if (FIXTURES === undefined)
  throw new Error('discovery fixtures not found: set LLMGW_FIXTURES to the folder holding nvidia-smi/ and sysfs-h100x8/');

const SMI = join(FIXTURES, 'nvidia-smi');
const H100_SYSFS = join(FIXTURES, 'sysfs-h100x8');
const NO_SYSFS = join(FIXTURES, 'no-such-sysfs');
const EXAMPLES = join(repoRoot, 'examples', 'inventories');

type Host = 'h100x8' | 'a100x8-pcie' | 'l40sx4';

function fixture(name: string): string {
  return readFileSync(join(SMI, name), 'utf8');
}

/** Serves a fixture host's recorded output for the four nvidia-smi calls discovery makes. */
function fixtureNvidiaSmi(
  host: Host,
  override: (args: string[]) => Awaited<ReturnType<RunNvidiaSmi>> | undefined = () => undefined,
): RunNvidiaSmi {
  return async (args) => {
    const overridden = override(args);
    if (overridden) return overridden;
    const first = args[0] ?? '';
    let file: string;
    if (first.startsWith('--query-gpu=')) file = `${host}.query-gpu.csv`;
    else if (first.startsWith('--query-compute-apps=')) file = `${host}.compute-apps.csv`;
    else if (first === 'topo' && args[1] === '-m') file = `${host}.topo-m.txt`;
    else if (args.length === 0) file = `${host}.nvidia-smi.txt`;
    else throw new Error(`unexpected nvidia-smi ${args.join(' ')}`);
    // Only the H100 host has a recorded banner; the others print nothing useful.
    const stdout = existsSync(join(SMI, file)) ? fixture(file) : '';
    return { code: 0, stdout, stderr: '' };
  };
}

const driverMissing: RunNvidiaSmi = async () => ({ code: 9, stdout: '', stderr: fixture('driver-missing.stderr.txt') });

describe('discovery on an 8x H100 SXM host with InfiniBand', () => {
  const discover = (fabricLabel?: string) =>
    discoverRealHost({ sysfsRoot: H100_SYSFS, fabricLabel, runNvidiaSmi: fixtureNvidiaSmi('h100x8') });

  it('reports eight healthy H100s joined all-to-all by 18 NVLinks, on two NUMA nodes', async () => {
    const host = await discover();
    expect(host.problems).toEqual([]);
    expect(host.gpuClass).toBe('H100');
    expect(host.gpus.map((g) => g.index)).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    for (const gpu of host.gpus) {
      expect(gpu.name).toBe('NVIDIA H100 80GB HBM3');
      expect(gpu.memoryTotalMib).toBe(81559);
      expect(gpu.computeCapability).toBe('9.0');
      expect(gpu.nvlinkPeers.map((p) => p.index)).toEqual([0, 1, 2, 3, 4, 5, 6, 7].filter((i) => i !== gpu.index));
      expect(gpu.nvlinkPeers.every((p) => p.links === 18)).toBe(true);
      expect(gpu.health?.problems).toEqual([]);
    }
    expect(host.gpus.map((g) => g.numaNode)).toEqual([0, 0, 0, 0, 1, 1, 1, 1]);
  });

  it('reads the CUDA version from the banner and the driver version from the GPUs', async () => {
    const host = await discover();
    expect(host.cudaVersion).toBe('12.4');
    expect(host.driverVersion).toBe('550.54.15');
    expect(host.gpus.every((g) => g.cudaVersion === '12.4' && g.driverVersion === '550.54.15')).toBe(true);
  });

  it('puts the eight 400 Gb/s InfiniBand HCAs in one fabric and leaves the Ethernet ports out', async () => {
    const host = await discover();
    expect(host.fabrics).toHaveLength(1);
    const [fabric] = host.fabrics;
    expect(fabric?.fabric).toBe('ib');
    expect(fabric?.rateGbps).toBe(400);
    expect(fabric?.hcas.map((h) => h.name)).toEqual(['mlx5_0', 'mlx5_1', 'mlx5_2', 'mlx5_3', 'mlx5_4', 'mlx5_5', 'mlx5_6', 'mlx5_7']);
    expect(fabric?.hcas.every((h) => h.rateGbps === 400 && h.linkLayer === 'InfiniBand' && h.state === 'ACTIVE')).toBe(true);
    expect(fabric?.hcas.map((h) => h.numaNode)).toEqual([0, 0, 0, 0, 1, 1, 1, 1]);
  });

  it('names the fabric from the agent label', async () => {
    const host = await discover('ib-a');
    expect(host.fabrics.map((f) => f.fabric)).toEqual(['ib-a']);
  });

  it('lists beside each GPU the HCA on its PCIe switch, named through the NIC legend', async () => {
    const host = await discover();
    expect(host.gpus.map((g) => g.nearHcas)).toEqual([0, 1, 2, 3, 4, 5, 6, 7].map((i) => [`mlx5_${i}`]));
  });

  it('reports the process nothing describes (pid 48213) as holding GPUs 4 and 5', async () => {
    const host = await discover();
    expect(host.computeProcesses).toEqual([{ pid: 48213, gpuIndices: [4, 5], usedMemoryMib: 144800 }]);
  });

  it('falls back to the sysfs NUMA node of each GPU when topo -m cannot be read', async () => {
    const host = await discoverRealHost({
      sysfsRoot: H100_SYSFS,
      runNvidiaSmi: fixtureNvidiaSmi('h100x8', (args) =>
        args[0] === 'topo' ? { code: 1, stdout: '', stderr: 'topology unavailable' } : undefined,
      ),
    });
    expect(host.gpus).toHaveLength(8);
    expect(host.gpus.map((g) => g.numaNode)).toEqual([0, 0, 0, 0, 1, 1, 1, 1]);
    expect(host.gpus.every((g) => g.nvlinkPeers.length === 0)).toBe(true);
    expect(host.problems).toEqual(['nvidia-smi topo -m failed (exit 1): topology unavailable']);
  });
});

describe('discovery on an 8x A100 PCIe host with NVLink bridges', () => {
  const discover = () => discoverRealHost({ sysfsRoot: NO_SYSFS, runNvidiaSmi: fixtureNvidiaSmi('a100x8-pcie') });

  it('sees NVLink between 0-1, 2-3, 4-5 and 6-7 and nowhere else', async () => {
    const host = await discover();
    expect(host.gpuClass).toBe('A100');
    const pairs = host.gpus.flatMap((g) => g.nvlinkPeers.map((p) => [g.index, p.index, p.links]));
    expect(pairs).toEqual([
      [0, 1, 12],
      [1, 0, 12],
      [2, 3, 12],
      [3, 2, 12],
      [4, 5, 12],
      [5, 4, 12],
      [6, 7, 12],
      [7, 6, 12],
    ]);
    expect(host.gpus.map((g) => g.numaNode)).toEqual([0, 0, 0, 0, 1, 1, 1, 1]);
  });

  it('marks GPU 6 as unusable for its uncorrected ECC errors, and only GPU 6', async () => {
    const host = await discover();
    const withProblems = host.gpus.filter((g) => (g.health?.problems.length ?? 0) > 0);
    expect(withProblems.map((g) => [g.index, g.health?.problems])).toEqual([[6, ['3 uncorrected ECC errors (volatile)']]]);
    expect(host.gpus[6]?.health?.uncorrectedEccErrors).toBe(3);
  });

  it('reports no fabric, no foreign processes and no host problem', async () => {
    const host = await discover();
    expect(host.fabrics).toEqual([]);
    expect(host.computeProcesses).toEqual([]);
    expect(host.problems).toEqual([]);
    expect(host.gpus.every((g) => g.nearHcas.length === 0)).toBe(true);
  });
});

describe('discovery on a 4x L40S host', () => {
  it('reports four GPUs on NUMA node 0 with no NVLink, and ECC [N/A] is no problem', async () => {
    const host = await discoverRealHost({ sysfsRoot: NO_SYSFS, runNvidiaSmi: fixtureNvidiaSmi('l40sx4') });
    expect(host.gpuClass).toBe('L40S');
    expect(host.gpus).toHaveLength(4);
    expect(host.gpus.map((g) => g.numaNode)).toEqual([0, 0, 0, 0]);
    expect(host.gpus.every((g) => g.nvlinkPeers.length === 0)).toBe(true);
    for (const gpu of host.gpus) {
      expect(gpu.health?.uncorrectedEccErrors).toBeUndefined();
      expect(gpu.health?.problems).toEqual([]);
    }
    expect(host.problems).toEqual([]);
  });
});

describe('discovery on a host whose driver is broken or missing', () => {
  it('reports zero GPUs and quotes nvidia-smi, instead of throwing', async () => {
    const host = await discoverRealHost({ sysfsRoot: NO_SYSFS, runNvidiaSmi: driverMissing });
    expect(host.gpus).toEqual([]);
    expect(host.gpuClass).toBe('');
    expect(host.problems).toHaveLength(1);
    expect(host.problems[0]).toContain('exit 9');
    expect(host.problems[0]).toContain("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver");
  });

  it('reports zero GPUs when nvidia-smi is not installed', async () => {
    const missing: RunNvidiaSmi = async () => {
      throw new Error('nvidia-smi not found on PATH (no NVIDIA driver installed?)');
    };
    const host = await discoverRealHost({ sysfsRoot: H100_SYSFS, runNvidiaSmi: missing });
    expect(host.gpus).toEqual([]);
    expect(host.problems).toEqual([expect.stringContaining('nvidia-smi not found on PATH')]);
  });
});

describe('nvidia-smi and sysfs parsing', () => {
  it('reads topo -m the same whether cells are split by tabs or spaces, with or without the empty column', () => {
    const original = fixture('h100x8.topo-m.txt');
    const expected = parseTopology(original);
    expect(parseTopology(original.replaceAll('\t', '   '))).toEqual(expected);
    expect(parseTopology(original.replaceAll('\t\tN/A', '\tN/A'))).toEqual(expected);
    expect(parseTopology(original.replace('\tGPU0', '\u001b[4m\tGPU0').replace('GPU NUMA ID', 'GPU NUMA ID\u001b[0m'))).toEqual(expected);
    expect(expected[0]).toMatchObject({ index: 0, cpuAffinity: '0-55,112-167', numaAffinity: 0 });
    expect(expected[0]?.nics).toContainEqual({ name: 'mlx5_8', relation: 'NODE' });
  });

  it('treats [N/A] and [Not Supported] as unreported, not as zero', () => {
    const [row] = parseQueryGpu('0, GPU-x, NVIDIA L4, 23034, 0, [Not Supported], 00000000:01:00.0, 550.90.07, [N/A], [N/A]\n');
    expect(row).toEqual({
      index: 0,
      uuid: 'GPU-x',
      name: 'NVIDIA L4',
      memoryTotalMib: 23034,
      memoryUsedMib: 0,
      computeCapability: '',
      pciBusId: '00000000:01:00.0',
      driverVersion: '550.90.07',
    });
  });

  it('refuses a GPU line it cannot read rather than dropping a GPU', () => {
    expect(() => parseQueryGpu('0, GPU-x, NVIDIA L4\n')).toThrow(/expected 10 fields/);
  });

  it('finds a GPU PCI device in sysfs from the bus id nvidia-smi prints', async () => {
    expect(await readPciNumaNode(H100_SYSFS, '00000000:9A:00.0')).toBe(1);
    expect(await readPciNumaNode(H100_SYSFS, '00000000:18:00.0')).toBe(0);
    expect(await readPciNumaNode(H100_SYSFS, '00000000:FF:00.0')).toBeUndefined();
    expect(await readPciNumaNode(NO_SYSFS, '00000000:18:00.0')).toBeUndefined();
  });

  it('reads HCA rate, state and link layer from sysfs, and nothing from a host without HCAs', async () => {
    const hcas = await readInfinibandHcas(H100_SYSFS);
    expect(hcas).toHaveLength(10);
    expect(hcas[0]).toEqual({ name: 'mlx5_0', rateGbps: 400, numaNode: 0, linkLayer: 'InfiniBand', state: 'ACTIVE' });
    expect(hcas[9]).toEqual({ name: 'mlx5_9', rateGbps: 200, numaNode: 1, linkLayer: 'Ethernet', state: 'ACTIVE' });
    expect(await readInfinibandHcas(NO_SYSFS)).toEqual([]);
  });

  it('flags a GPU hotter than the threshold', () => {
    expect(gpuProblems({ temperatureC: 92, uncorrectedEcc: 0 })).toEqual(['temperature 92 °C over 85 °C']);
    expect(gpuProblems({ temperatureC: 85 })).toEqual([]);
    expect(gpuProblems({ temperatureC: 80 }, { maxTemperatureC: 75 })).toEqual(['temperature 80 °C over 75 °C']);
  });

  it('names GPU classes the way catalog profiles do', () => {
    expect(gpuClassFromName('NVIDIA H100 80GB HBM3')).toBe('H100');
    expect(gpuClassFromName('NVIDIA A100-PCIE-40GB')).toBe('A100');
    expect(gpuClassFromName('NVIDIA A100 80GB PCIe')).toBe('A100');
    expect(gpuClassFromName('NVIDIA L40S')).toBe('L40S');
    expect(gpuClassFromName('NVIDIA L4')).toBe('L4');
    expect(gpuClassFromName('NVIDIA H200')).toBe('H200');
    expect(gpuClassFromName('NVIDIA GH200 480GB')).toBe('GH200');
    expect(gpuClassFromName('NVIDIA GeForce RTX 4090')).toBe('GeForce');
  });
});

describe('simulated inventories', () => {
  const tmp = mkdtempSync(join(tmpdir(), 'llmgw-discovery-'));

  it('rejects a bad file with a message naming the file and every bad path', async () => {
    const file = join(tmp, 'bad.yaml');
    writeFileSync(
      file,
      [
        'gpus:',
        '  - { index: 0, name: NVIDIA L40S, memoryTotalMib: 46068 }',
        '  - { index: 1, name: NVIDIA L40S, memoryTotalMib: 46068, nearHcas: [mlx5_0] }',
        '  - { index: 2, name: NVIDIA L40S, memoryTotalMib: lots, colour: green }',
        '',
      ].join('\n'),
    );
    const error = await loadSimulatedInventory(file, { nodeId: 'n1' }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(Error);
    const message = (error as Error).message;
    expect(message).toContain(file);
    expect(message).toContain('gpus[2].memoryTotalMib: expected number');
    expect(message).toContain('gpus[2]: Unrecognized key: "colour"');
  });

  it('rejects references to GPUs and HCAs the file does not list', async () => {
    const file = join(tmp, 'refs.json');
    writeFileSync(
      file,
      JSON.stringify({
        gpus: [{ index: 0, name: 'NVIDIA L40S', memoryTotalMib: 46068, nvlinkPeers: [{ index: 3, links: 4 }], nearHcas: ['mlx5_0'] }],
      }),
    );
    await expect(loadSimulatedInventory(file, { nodeId: 'n1' })).rejects.toThrow(
      /gpus\[0\]\.nvlinkPeers\[0\]\.index: no other GPU has index 3[\s\S]*gpus\[0\]\.nearHcas\[0\]: mlx5_0 is not listed under hcas/,
    );
  });

  it('validates every built-in inventory with the same schema as files', () => {
    for (const make of Object.values(BUILTIN_INVENTORIES)) {
      expect(SimulatedInventory.safeParse(make()).success).toBe(true);
    }
  });

  it.each([
    ['h100x8.yaml', 'builtin:h100x8'],
    ['a100x8-pcie.yaml', 'builtin:a100x8'],
    ['l40sx4.yaml', 'builtin:l40sx4'],
  ])('example %s describes the same host as %s', async (file, builtin) => {
    const fromFile = await loadSimulatedInventory(join(EXAMPLES, file), { nodeId: 'sim-1' });
    const fromCode = await loadSimulatedInventory(builtin, { nodeId: 'sim-1' });
    expect(fromFile).toEqual(fromCode);
  });

  it('simulates the fixture hosts: H100 NVLink and InfiniBand, A100 pairs, L40S without either', async () => {
    const h100 = await loadSimulatedInventory('builtin:h100x8', { nodeId: 'sim-1' });
    expect(h100.gpuClass).toBe('H100');
    expect(h100.gpus.map((g) => g.numaNode)).toEqual([0, 0, 0, 0, 1, 1, 1, 1]);
    expect(h100.gpus.every((g) => g.nvlinkPeers.length === 7)).toBe(true);
    expect(h100.fabrics.map((f) => [f.fabric, f.rateGbps, f.hcas.length])).toEqual([['ib', 400, 8]]);
    const a100 = await loadSimulatedInventory('builtin:a100x8', { nodeId: 'sim-1' });
    expect(a100.gpus.map((g) => g.nvlinkPeers.map((p) => p.index))).toEqual([[1], [0], [3], [2], [5], [4], [7], [6]]);
    const l40s = await loadSimulatedInventory('builtin:l40sx4', { nodeId: 'sim-1' });
    expect(l40s.fabrics).toEqual([]);
    expect(l40s.gpus.every((g) => g.nvlinkPeers.length === 0)).toBe(true);
  });

  it('gives two simulated hosts different GPU uuids', async () => {
    const a = await loadSimulatedInventory('builtin:h100x8', { nodeId: 'sim-a' });
    const b = await loadSimulatedInventory('builtin:h100x8', { nodeId: 'sim-b' });
    const uuids = [...a.gpus, ...b.gpus].map((g) => g.uuid);
    expect(new Set(uuids).size).toBe(16);
    expect(uuids[0]).toMatch(/^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
  });

  it('puts the ib-a and ib-b example hosts on different fabrics', async () => {
    const a = await loadSimulatedInventory(join(EXAMPLES, 'h100x8-ib-a.yaml'), { nodeId: 'a' });
    const b = await loadSimulatedInventory(join(EXAMPLES, 'h100x8-ib-b.yaml'), { nodeId: 'b' });
    expect(a.fabrics.map((f) => f.fabric)).toEqual(['ib-a']);
    expect(b.fabrics.map((f) => f.fabric)).toEqual(['ib-b']);
  });

  it('judges simulated GPU health with the same rules as real GPUs', async () => {
    const file = join(tmp, 'sick.yaml');
    writeFileSync(file, 'gpus:\n  - { index: 0, name: NVIDIA L40S, memoryTotalMib: 46068, uncorrectedEccErrors: 2, temperatureC: 95 }\n');
    const host = await loadSimulatedInventory(file, { nodeId: 'n1', maxTemperatureC: 90 });
    expect(host.gpus[0]?.health?.problems).toEqual(['2 uncorrected ECC errors (volatile)', 'temperature 95 °C over 90 °C']);
    expect(host.gpuClass).toBe('L40S');
  });

  it('names the unknown built-in and the ones that exist', async () => {
    await expect(loadSimulatedInventory('builtin:b200x8', { nodeId: 'n1' })).rejects.toThrow(
      /builtin:b200x8.*builtin:h100x8, builtin:a100x8, builtin:l40sx4/,
    );
  });
});
