// The agent's judgement of GPU faults while engines run, fed by the stand-in nvidia-smi with
// faults injected mid-run (Xid 79/48/94/95 in the kernel log, uncorrected ECC, a GPU gone).
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { judgeGpuFaults, kernelBusId, parseXidLines } from '../../agent/discovery/gpu-faults.js';
import { parseQueryGpu, QUERY_GPU_FIELDS } from '../../agent/discovery/nvidia-smi.js';

const SMI = join(__dirname, '../helpers/bin/nvidia-smi');

function standIn(faults: string): { smi(...args: string[]): string } {
  const env = { ...process.env, LLMGW_FAKE_SMI_HOST: 'h100x8', LLMGW_FAKE_SMI_FAULTS: faults };
  return { smi: (...args) => execFileSync(SMI, args, { env, encoding: 'utf8' }) };
}

describe('GPU faults while serving', () => {
  it('names a GPU lost to Xid 79, 48, 94 or 95, one with uncorrected ECC, and one gone, and nothing else', () => {
    const dir = mkdtempSync(join(tmpdir(), 'llmgw-smi-faults-'));
    const { smi } = standIn(dir);
    const query = (): string => smi(`--query-gpu=${QUERY_GPU_FIELDS.join(',')}`, '--format=csv,noheader,nounits');
    const watched = parseQueryGpu(query()).map((row) => ({ index: row.index, pciBusId: row.pciBusId }));
    expect(judgeGpuFaults(watched, parseQueryGpu(query()), [])).toEqual([]);

    smi('--llmgw-inject', 'xid', '1', '79');
    smi('--llmgw-inject', 'xid', '2', '48');
    smi('--llmgw-inject', 'xid', '4', '95');
    smi('--llmgw-inject', 'xid', '6', '13'); // a graphics engine exception: the application's own fault
    smi('--llmgw-inject', 'ecc', '5', '2');
    smi('--llmgw-inject', 'gone', '7');
    const faults = judgeGpuFaults(watched, parseQueryGpu(query()), parseXidLines(readFileSync(join(dir, 'kmsg'), 'utf8')));
    expect(faults).toEqual([
      { index: 1, reason: 'Xid 79: GPU has fallen off the bus' },
      { index: 2, reason: 'Xid 48: double-bit ECC error' },
      { index: 4, reason: 'Xid 95: uncontained ECC error' },
      { index: 5, reason: '2 uncorrected ECC error(s)' },
      { index: 7, reason: 'gone from nvidia-smi' },
    ]);

    smi('--llmgw-inject', 'clear');
    expect(judgeGpuFaults(watched, parseQueryGpu(query()), [])).toEqual([]);
  });

  it('reads the kernel’s own Xid lines and matches nvidia-smi’s bus ids to them', () => {
    const kmsg = [
      '[  912.123456] NVRM: Xid (PCI:0000:3b:00): 94, pid=1234, name=python3, Ch 00000008',
      '[  913.000000] NVRM: GPU at PCI:0000:3b:00: GPU-1234',
      "[  914.000000] NVRM: Xid (PCI:0000:86:00.0): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
    ].join('\n');
    expect(parseXidLines(kmsg)).toEqual([
      { pciBusId: '0000:3b:00', xid: 94 },
      { pciBusId: '0000:86:00', xid: 79 },
    ]);
    expect(kernelBusId('00000000:3B:00.0')).toBe('0000:3b:00');
    expect(judgeGpuFaults([{ index: 3, pciBusId: '00000000:3B:00.0' }], undefined, parseXidLines(kmsg))).toEqual([
      { index: 3, reason: 'Xid 94: contained ECC error (uncorrectable)' },
    ]);
  });
});
