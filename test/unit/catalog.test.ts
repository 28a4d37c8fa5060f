// The catalog guards what may run: a mistake in the file must be refused with its path
// and line, the example must stay valid, and edits must apply without a restart.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { formatCatalogErrors, loadCatalogFile, parseCatalog, type CatalogError } from '../../catalog/load.js';
import { chooseProfile, profileToEngineProfile } from '../../catalog/lookup.js';
import type { Catalog } from '../../catalog/schema.js';
import { validateCatalogCommand } from '../../catalog/validate-command.js';
import { createCatalogSource } from '../../catalog/watch.js';
import { Engine, Launcher } from '../../proto/gen/llmgw/v1/shard_pb.js';

const EXAMPLE = 'examples/catalog.yaml';

function errorsOf(text: string): CatalogError[] {
  const result = parseCatalog(text);
  if (result.ok) throw new Error('expected the catalog to be rejected');
  return result.errors;
}

function catalogOf(text: string): Catalog {
  const result = parseCatalog(text);
  if (!result.ok) throw new Error(formatCatalogErrors(result.errors, 'test.yaml'));
  return result.catalog;
}

const demo = (profileLines: string) => `models:
  - name: demo
    source: llmgw/fake-demo
    profiles:
      - name: fake-1gpu
        engine: fake
        gpuClass: H100
${profileLines}`;

describe('the example catalog', () => {
  it('validates, with every model and profile counted', () => {
    const { exitCode, output } = validateCatalogCommand(EXAMPLE);
    expect(output).toBe(`${EXAMPLE}: 6 models, 10 profiles, OK`);
    expect(exitCode).toBe(0);
  });

  it('fills in the defaults an operator leaves out', () => {
    const result = loadCatalogFile(EXAMPLE);
    if (!result.ok) throw new Error(formatCatalogErrors(result.errors, EXAMPLE));
    const choice = chooseProfile(result.catalog, 'demo', { profile: 'fake-1gpu' });
    if (!choice.ok) throw new Error(choice.message);
    expect(choice.profile).toMatchObject({ tensorParallel: 1, pipelineParallel: 1, nodes: 1, launcher: 'native', env: {} });
  });

  it('runs the 405B model on two hosts through Ray', () => {
    const result = loadCatalogFile(EXAMPLE);
    if (!result.ok) throw new Error(formatCatalogErrors(result.errors, EXAMPLE));
    const choice = chooseProfile(result.catalog, 'llama-3.1-405b-instruct-fp8', { gpuClass: 'H100' });
    if (!choice.ok) throw new Error(choice.message);
    const wire = profileToEngineProfile(choice.model, choice.profile);
    expect(wire).toMatchObject({
      engine: Engine.VLLM,
      launcher: Launcher.RAY,
      model: 'llama-3.1-405b-instruct-fp8',
      servedName: 'llama-3.1-405b-instruct-fp8',
      modelSource: 'meta-llama/Llama-3.1-405B-Instruct-FP8',
      tensorParallel: 8,
      pipelineParallel: 2,
      gpusPerNode: 8,
      nodes: 2,
      minGpuMemoryMib: 81000,
    });
  });
});

describe('a catalog with mistakes', () => {
  it('names an unknown engine and the engines that exist', () => {
    const errors = errorsOf(demo('        gpusPerNode: 1\n').replace('engine: fake', 'engine: tgi'));
    expect(errors).toEqual([
      { path: 'models[0].profiles[0].engine', message: 'unknown engine "tgi" (expected one of vllm, sglang, fake, llamacpp)', line: 6 },
    ]);
    expect(formatCatalogErrors(errors, 'catalog.yaml')).toBe(
      'catalog.yaml:6: models[0].profiles[0].engine: unknown engine "tgi" (expected one of vllm, sglang, fake, llamacpp)',
    );
  });

  it('refuses parallelism that does not add up to the GPUs, with the numbers', () => {
    const errors = errorsOf(demo('        tensorParallel: 4\n        gpusPerNode: 2\n'));
    expect(errors).toEqual([
      {
        path: 'models[0].profiles[0].tensorParallel',
        message: 'tensorParallel 4 × pipelineParallel 1 = 4 GPUs, but gpusPerNode 2 × nodes 1 = 2',
        line: 8,
      },
    ]);
  });

  it('refuses a model listed twice, pointing at the second', () => {
    const model = `  - name: demo\n    source: llmgw/fake-demo\n    profiles:\n      - { name: p, engine: fake, gpuClass: H100, gpusPerNode: 1 }\n`;
    const errors = errorsOf(`models:\n${model}${model}`);
    expect(errors).toEqual([{ path: 'models[1].name', message: 'duplicate model name "demo" (first used at models[0])', line: 6 }]);
  });

  it('refuses a malformed env name and the variables the agent sets', () => {
    const errors = errorsOf(
      demo('        gpusPerNode: 1\n        env:\n          NCCL-DEBUG: INFO\n          CUDA_VISIBLE_DEVICES: "0"\n'),
    );
    expect(errors.map((e) => e.path)).toEqual([
      'models[0].profiles[0].env["NCCL-DEBUG"]',
      'models[0].profiles[0].env.CUDA_VISIBLE_DEVICES',
    ]);
    expect(errors[0]?.message).toMatch(/not a valid environment variable name/);
    expect(errors[0]?.line).toBe(10);
    expect(errors[1]?.message).toMatch(/set by the agent/);
  });

  it('names an unknown key and the keys that are allowed', () => {
    const errors = errorsOf(demo('        gpusPerNode: 1\n        tensorParalel: 2\n'));
    expect(errors).toHaveLength(1);
    expect(errors[0]?.path).toBe('models[0].profiles[0].tensorParalel');
    expect(errors[0]?.message).toMatch(/^unknown key "tensorParalel" in a profile \(allowed: .*tensorParallel/);
    expect(errors[0]?.line).toBe(9);

    const two = errorsOf(demo('        gpusPerNode: 1\n        tensorParalel: 2\n        gpus: 2\n'));
    expect(two.map((e) => `${e.line}: ${e.path}`)).toEqual(['9: models[0].profiles[0].tensorParalel', '10: models[0].profiles[0].gpus']);
    expect(two[1]?.message).toMatch(/^unknown keys "tensorParalel", "gpus" in a profile/);
  });

  it('points at an argument written as a number', () => {
    const errors = errorsOf(demo('        gpusPerNode: 1\n        args: ["--max-model-len", 8192]\n'));
    expect(errors).toEqual([
      { path: 'models[0].profiles[0].args[1]', message: 'args must be strings; quote this value (YAML read it as number 8192)', line: 9 },
    ]);
  });

  it('reports broken YAML with its line', () => {
    const errors = errorsOf('models:\n  - name: demo\n\tsource: llmgw/fake-demo\n');
    expect(errors).toEqual([{ path: '', message: 'Tabs are not allowed as indentation', line: 3 }]);
    expect(formatCatalogErrors(errors, 'catalog.yaml')).toBe('catalog.yaml:3: Tabs are not allowed as indentation');
  });

  it('refuses vLLM on several nodes without Ray, and Ray for SGLang', () => {
    const vllm = errorsOf(
      demo('        gpusPerNode: 1\n        nodes: 2\n        tensorParallel: 2\n').replace('engine: fake', 'engine: vllm'),
    );
    expect(vllm).toEqual([
      { path: 'models[0].profiles[0].launcher', message: expect.stringMatching(/needs launcher ray/) as unknown, line: 5 },
    ]);
    const sglang = errorsOf(demo('        gpusPerNode: 1\n        launcher: ray\n').replace('engine: fake', 'engine: sglang'));
    expect(sglang.map((e) => e.path)).toEqual(['models[0].profiles[0].launcher']);
  });

  it('reports every mistake in one pass', () => {
    const errors = errorsOf(`models:
  - name: Demo
    source: org/x
    profiles:
      - { name: a, engine: tgi, gpuClass: H100, gpusPerNode: 1 }
  - name: other
    source: org/y
    profiles:
      - { name: b, engine: fake, gpuClass: H100, gpusPerNode: 0 }
      - { name: b, engine: fake, gpuClass: H100, tensorParallel: 2, gpusPerNode: 1 }
`);
    expect(errors.map((e) => `${e.line}: ${e.path}`)).toEqual([
      '2: models[0].name',
      '5: models[0].profiles[0].engine',
      '9: models[1].profiles[0].gpusPerNode',
      '10: models[1].profiles[1].tensorParallel',
      '10: models[1].profiles[1].name',
    ]);
  });

  it('names a missing file', () => {
    const { exitCode, output } = validateCatalogCommand('does/not/exist.yaml');
    expect(exitCode).toBe(1);
    expect(output).toContain('does/not/exist.yaml: cannot read catalog does/not/exist.yaml: no such file');
  });
});

describe('choosing a profile', () => {
  const catalog = catalogOf(`models:
  - name: demo
    source: llmgw/fake-demo
    profiles:
      - { name: fake-1gpu, engine: fake, gpuClass: H100, gpusPerNode: 1 }
      - { name: fake-tp2, engine: fake, gpuClass: H100, tensorParallel: 2, gpusPerNode: 2 }
      - { name: fake-a100, engine: fake, gpuClass: A100, gpusPerNode: 1 }
`);

  it('takes the first profile when nothing is asked for, and the first of a GPU class', () => {
    expect(chooseProfile(catalog, 'demo')).toMatchObject({ ok: true, profile: { name: 'fake-1gpu' } });
    expect(chooseProfile(catalog, 'demo', { gpuClass: 'A100' })).toMatchObject({ ok: true, profile: { name: 'fake-a100' } });
  });

  it('lists the valid choices when asked for one that does not exist', () => {
    expect(chooseProfile(catalog, 'demo', { profile: 'x' })).toEqual({
      ok: false,
      failureType: 'UnknownProfile',
      message: 'unknown profile "x" for model demo; valid profiles: fake-1gpu, fake-tp2, fake-a100',
    });
    expect(chooseProfile(catalog, 'demo', { gpuClass: 'L40S' })).toEqual({
      ok: false,
      failureType: 'UnknownGpuClass',
      message: 'model demo has no profile for GPU class "L40S"; valid GPU classes: H100, A100',
    });
    expect(chooseProfile(catalog, 'llama', {})).toEqual({
      ok: false,
      failureType: 'UnknownModel',
      message: 'unknown model "llama"; valid models: demo',
    });
  });

  it('refuses a profile that does not run on the requested GPU class', () => {
    expect(chooseProfile(catalog, 'demo', { profile: 'fake-tp2', gpuClass: 'A100' })).toMatchObject({
      ok: false,
      message: 'profile fake-tp2 of model demo runs on H100, not A100; profiles for A100: fake-a100',
    });
  });
});

describe('a catalog file being edited', () => {
  let dir: string | undefined;
  afterEach(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
    dir = undefined;
  });

  it('picks up an edit without a restart and keeps the last good catalog on a bad edit', () => {
    dir = mkdtempSync(join(tmpdir(), 'llmgw-catalog-'));
    const file = join(dir, 'catalog.yaml');
    const profile = '      - { name: p, engine: fake, gpuClass: H100, gpusPerNode: 1 }\n';
    writeFileSync(file, `models:\n  - name: first\n    source: org/s\n    profiles:\n${profile}`);
    const logged: string[] = [];
    const source = createCatalogSource(file, { log: (line) => logged.push(line) });
    expect(source.get().models.map((m) => m.name)).toEqual(['first']);

    writeFileSync(
      file,
      `models:\n  - name: first\n    source: org/s\n    profiles:\n${profile}  - name: second\n    source: org/s\n    profiles:\n${profile}`,
    );
    expect(source.get().models.map((m) => m.name)).toEqual(['first', 'second']);

    writeFileSync(
      file,
      `models:\n  - name: first\n    source: org/s\n    profiles:\n      - { name: p, engine: tgi, gpuClass: H100, gpusPerNode: 1 }\n`,
    );
    expect(source.get().models.map((m) => m.name)).toEqual(['first', 'second']);
    expect(source.get().models.map((m) => m.name)).toEqual(['first', 'second']);
    expect(logged).toHaveLength(1);
    expect(logged[0]).toContain(`${file}:5: models[0].profiles[0].engine: unknown engine "tgi"`);

    writeFileSync(file, `models:\n  - name: third\n    source: org/s\n    profiles:\n${profile}`);
    expect(source.get().models.map((m) => m.name)).toEqual(['third']);
    source.close();
  });

  it('refuses to start from a catalog that is invalid', () => {
    dir = mkdtempSync(join(tmpdir(), 'llmgw-catalog-'));
    const file = join(dir, 'catalog.yaml');
    writeFileSync(file, 'models: []\n');
    expect(() => createCatalogSource(file)).toThrow(/models: the catalog needs at least one model/);
  });
});
