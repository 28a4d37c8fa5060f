// Guards which GPUs of one host a shard gets: NVLink-connected sets first, then one NUMA
// node, and a profile's memory minimum checked against what the host reports, memory used
// by other processes included. The hosts are the fixture hosts as discovery reads them,
// turned into the node workflow's inventory the way a registration is; the node's own
// reserve rule (which calls chooseGpus) hands the GPUs out.
import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { discoverRealHost, type RunNvidiaSmi } from '../../agent/discovery/discover.js';
import type { ReserveResult } from '../../common/node-types.js';
import { registeredNodeState } from '../helpers/registered-node.js';
import { reserve, type NodeState } from '../../workflows/node/state.js';

const repoRoot = resolve(__dirname, '..', '..');
// The fixtures are shared between checkouts; LLMGW_FIXTURES points elsewhere when needed.
const FIXTURES = [process.env.LLMGW_FIXTURES, join(repoRoot, 'test', 'fixtures'), join(repoRoot, '..', 'shared', 'fixtures')].find(
  (dir): dir is string => dir !== undefined && existsSync(join(dir, 'nvidia-smi')),
);
if (FIXTURES === undefined) throw new Error('discovery fixtures not found: set LLMGW_FIXTURES to the folder holding nvidia-smi/');
const SMI = join(FIXTURES, 'nvidia-smi');
const NOW = '2025-01-01T00:00:00.000Z';

type Host = 'h100x8' | 'a100x8-pcie';

/** Serves a fixture host's recorded nvidia-smi output; `edit` may rewrite a file's text first. */
function fixtureNvidiaSmi(host: Host, edit: (file: string, text: string) => string = (_, text) => text): RunNvidiaSmi {
  return async (args) => {
    const first = args[0] ?? '';
    let file: string;
    if (first.startsWith('--query-gpu=')) file = `${host}.query-gpu.csv`;
    else if (first.startsWith('--query-compute-apps=')) file = `${host}.compute-apps.csv`;
    else if (first === 'topo' && args[1] === '-m') file = `${host}.topo-m.txt`;
    else file = `${host}.nvidia-smi.txt`;
    const text = existsSync(join(SMI, file)) ? readFileSync(join(SMI, file), 'utf8') : '';
    return { code: 0, stdout: edit(file, text), stderr: '' };
  };
}

/** A node workflow's state after the fixture host registered with it. */
async function registeredNode(host: Host, runNvidiaSmi: RunNvidiaSmi = fixtureNvidiaSmi(host)): Promise<NodeState> {
  const discovered = await discoverRealHost({ sysfsRoot: join(FIXTURES!, 'no-such-sysfs'), runNvidiaSmi });
  return registeredNodeState(host, discovered, { managementAddress: '10.0.0.1' }, NOW);
}

let shards = 0;
function take(state: NodeState, count: number, minFreeMemoryMib?: number): ReserveResult {
  shards++;
  return reserve(
    state,
    { shardId: `s${shards}`, replicaId: `replica/t/${shards}`, count, ...(minFreeMemoryMib !== undefined ? { minFreeMemoryMib } : {}) },
    NOW,
  );
}

function gpusOf(result: ReserveResult): number[] {
  if (!result.ok) throw new Error(result.reason);
  return result.gpuIndices;
}

describe('GPU choice on the 8x A100 PCIe host (NVLink bridges 0-1, 2-3, 4-5, 6-7; NUMA 0 = GPUs 0-3; GPU 6 has ECC errors)', () => {
  it('gives a TP2 a bridged pair', async () => {
    const node = await registeredNode('a100x8-pcie');
    expect(gpusOf(take(node, 2))).toEqual([0, 1]);
  });

  it('gives the next TP2 the next bridged pair, not the two lowest free GPUs', async () => {
    const node = await registeredNode('a100x8-pcie');
    expect(gpusOf(take(node, 1))).toEqual([0]);
    // 1 and 2 are the lowest free, but only 2-3 is bridged.
    expect(gpusOf(take(node, 2))).toEqual([2, 3]);
  });

  it('gives a TP4 two bridged pairs on one NUMA node', async () => {
    const node = await registeredNode('a100x8-pcie');
    const gpus = gpusOf(take(node, 4));
    expect(gpus).toEqual([0, 1, 2, 3]);
    const numa = new Set(node.inventory!.gpus.filter((gpu) => gpus.includes(gpu.index)).map((gpu) => gpu.numaNode));
    expect([...numa]).toEqual([0]);
  });

  it('never gives GPU 6, whose ECC errors make NUMA node 1 too small for a second TP4', async () => {
    const node = await registeredNode('a100x8-pcie');
    expect(gpusOf(take(node, 4))).toEqual([0, 1, 2, 3]);
    const second = take(node, 4);
    expect(second.ok).toBe(false);
    if (!second.ok) expect(second.reason).toMatch(/needs 4 GPUs, 3 free and healthy \(GPU 6: .*uncorrected ECC/);
    // A TP2 still fits on the bridged pair 4-5.
    expect(gpusOf(take(node, 2))).toEqual([4, 5]);
  });
});

describe('GPU memory: a profile minimum against what the host reports', () => {
  // GPU 0 of the A100 host half used by a process nothing describes: 40960 of 81920 MiB.
  const halfUsedGpu0 = fixtureNvidiaSmi('a100x8-pcie', (file, text) => {
    if (file.endsWith('.query-gpu.csv')) return text.replace(/^(0, [^,]+, [^,]+, 81920), 0,/m, '$1, 40960,');
    if (file.endsWith('.compute-apps.csv')) return '51234, GPU-0fd630f1-f29d-4da9-953f-48f1a09f76b5, 40960\n';
    return text;
  });

  it('does not place a profile needing 60 GiB per GPU on a half-used GPU', async () => {
    const node = await registeredNode('a100x8-pcie', halfUsedGpu0);
    expect(node.inventory!.gpus[0]!.memoryUsedMib).toBe(40960);
    expect(gpusOf(take(node, 1, 60 * 1024))).toEqual([1]);
    // GPU 0 out also breaks up the 0-1 pair, so a TP2 goes to the next bridged pair.
    expect(gpusOf(take(node, 2, 60 * 1024))).toEqual([2, 3]);
  });

  it('places a profile whose minimum the half-used GPU still meets there', async () => {
    const node = await registeredNode('a100x8-pcie', halfUsedGpu0);
    expect(gpusOf(take(node, 2, 40 * 1024))).toEqual([0, 1]);
  });

  it('says which GPU has too little free memory when nothing fits', async () => {
    const node = await registeredNode('a100x8-pcie', halfUsedGpu0);
    const result = take(node, 8, 60 * 1024);
    expect(result.ok).toBe(false);
    if (!result.ok) expect(result.reason).toContain('GPU 0: 40960 MiB free < 61440 MiB needed');
  });

  it('counts the memory of the unknown process on the H100 host (GPUs 4 and 5, 72411 MiB used each)', async () => {
    const node = await registeredNode('h100x8');
    // Six GPUs have the 40 GiB free; 4 and 5 do not, though no allocation holds them.
    expect(gpusOf(take(node, 6, 40 * 1024))).toEqual([0, 1, 2, 3, 6, 7]);
    const rest = take(node, 1, 40 * 1024);
    expect(rest.ok).toBe(false);
    if (!rest.ok) expect(rest.reason).toContain('GPU 4: 9148 MiB free < 40960 MiB needed');
  });
});
