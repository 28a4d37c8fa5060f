// `npm run check:gpu-host` on a host without GPUs: the stand-in nvidia-smi (the h100x8 fixture)
// answers the agent's discovery, so the check's own path runs here as it does on a lent GPU
// machine (scripts/device-check.sh), where PyTorch also asks CUDA what each engine sees.
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const CHECK = join(__dirname, '../../dist/bench/gpu-host.js');
const SMI_DIR = join(__dirname, '../helpers/bin');

describe('check:gpu-host', () => {
  it('discovers the host through a real agent process, gives each engine only its GPUs, and the agent adopts them', async () => {
    const run = await promisify(execFile)(process.execPath, [CHECK], {
      env: { ...process.env, PATH: `${SMI_DIR}:${process.env.PATH ?? ''}`, LLMGW_FAKE_SMI_HOST: 'h100x8' },
      timeout: 90_000,
    }).catch((error: { stdout?: string; stderr?: string; code?: number }) => error);
    const out = `${run.stdout ?? ''}`;
    expect(out, `${out}\n${run.stderr ?? ''}`).toContain("ok   the agent's discovery matches nvidia-smi: 8 GPU(s) reported, 8 present");
    expect(out).toMatch(/ok {3}shard given GPU 0 (gets |sees exactly it: )CUDA_VISIBLE_DEVICES=0/);
    expect(out).toMatch(/ok {3}shard given no GPU (gets CUDA_VISIBLE_DEVICES=""|sees none)/);
    expect(out).toMatch(/ok {3}profile setting CUDA_VISIBLE_DEVICES=0 without a GPU given (gets ""|sees none)/);
    expect(out).toContain('ok   the agent process adopted the engines its supervisor started: gpu0, none, sneaky');
    expect(out).toContain('all checks hold');
  }, 120_000);
});
