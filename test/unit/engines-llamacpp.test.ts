// llama.cpp's command line: llama-server on the one GGUF of the local weights, with the served
// name, address, port, metrics, a share of the cores and the profile's args last; refusals that
// name what to do (no binary, no GGUF, several, more than one node), and its load signals.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { buildEngineLaunch } from '../../agent/engines/index.js';
import { inFlightFromMetrics } from '../../agent/drain.js';
import { parseEngineLoad } from '../../router/engines/scraper.js';
import { parseCatalog } from '../../catalog/load.js';
import { Engine } from '../../proto/gen/llmgw/v1/shard_pb.js';
import { ctx, expectInvalidSpec, MARKERS, shard } from '../helpers/engine-launch.js';

const LLAMA = ['/opt/llama/llama-server'];

function modelDir(files: string[]): string {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-gguf-'));
  for (const file of files) writeFileSync(join(dir, file), 'GGUF');
  return dir;
}

const spec = (source: string, over: Parameters<typeof shard>[0] = {}, gpus = [3]) =>
  shard(
    { engine: Engine.LLAMACPP, modelSource: `file://${source}`, servedName: 'gemma', args: ['--parallel', '2'], ...over },
    { gpuIndices: gpus },
  );

describe('llama.cpp launch', () => {
  it('starts llama-server on the one .gguf of a file:// folder, metrics on, profile args last', () => {
    const dir = modelDir(['gemma.gguf', 'README.md']);
    const launch = buildEngineLaunch(spec(dir), ctx({ llamaServerCommand: LLAMA, hostCpus: 16, hostGpus: 8 }));
    expect(launch.servesHttp).toBe(true);
    expect(launch.healthPath).toBe('/health');
    const [engine] = launch.processes;
    expect(engine!.argv).toEqual([
      ...LLAMA,
      ...['--model', join(dir, 'gemma.gguf'), '--alias', 'gemma', '--host', '10.0.0.5', '--port', '18000'],
      ...['--metrics', '--slots', '--threads', '2', '--no-repack', '--parallel', '2'],
    ]);
    expect(engine!.env).toMatchObject({ ...MARKERS, CUDA_VISIBLE_DEVICES: '3' });
  });

  it('offloads every layer with a GPU backend, and a source may name the file and a split model its first part', () => {
    const dir = modelDir(['big-00001-of-00002.gguf', 'big-00002-of-00002.gguf']);
    const launch = buildEngineLaunch(spec(dir), ctx({ llamaServerCommand: LLAMA, llamaServerGpu: true, hostCpus: 2, hostGpus: 8 }));
    const argv = launch.processes[0]!.argv;
    expect(argv).toContain(join(dir, 'big-00001-of-00002.gguf'));
    expect(argv.join(' ')).toMatch(/--threads 1 --n-gpu-layers 999 --parallel 2$/);
    const file = join(modelDir(['a.gguf', 'b.gguf']), 'b.gguf');
    expect(buildEngineLaunch(spec(file), ctx({ llamaServerCommand: LLAMA })).processes[0]!.argv).toContain(file);
  });

  it('refuses a host without llama-server, weights that are not one GGUF, and a hub id it cannot read', () => {
    const one = modelDir(['m.gguf']);
    expectInvalidSpec(() => buildEngineLaunch(spec(one), ctx()), /no llama-server found: run `llmgw engines install llamacpp`/);
    const none = modelDir(['model.safetensors']);
    expectInvalidSpec(() => buildEngineLaunch(spec(none), ctx({ llamaServerCommand: LLAMA })), /holds no \.gguf file/);
    const two = modelDir(['a.gguf', 'b.gguf']);
    expectInvalidSpec(
      () => buildEngineLaunch(spec(two), ctx({ llamaServerCommand: LLAMA })),
      /2 GGUF files \(a\.gguf, b\.gguf\): name one/,
    );
    expectInvalidSpec(
      () => buildEngineLaunch(shard({ engine: Engine.LLAMACPP, modelSource: 'engine://gemma' }), ctx({ llamaServerCommand: LLAMA })),
      /needs local GGUF weights/,
    );
  });
});

describe('llama.cpp load signals', () => {
  const page = [
    '# TYPE llamacpp:prompt_tokens_total counter',
    'llamacpp:prompt_tokens_total 300',
    'llamacpp:prompt_tokens_cached_total 700',
    'llamacpp:prompt_seconds_total 1.5',
    'llamacpp:n_decode_total 42',
    'llamacpp:requests_processing 2',
    'llamacpp:requests_deferred 3',
    '',
  ].join('\n');

  it('reads running and deferred requests, and counts cached tokens among the prompt tokens as vLLM does', () => {
    expect(parseEngineLoad(page)).toMatchObject({
      running: 2,
      waiting: 3,
      kvUsage: 0,
      promptTokens: 1000,
      cachedTokens: 700,
      requests: 42,
      prefillSeconds: 1.5,
    });
  });

  it('drains until no request is in a slot or waiting for one', () => {
    expect(inFlightFromMetrics(page)).toBe(5);
  });
});

describe('llama.cpp in the catalog', () => {
  const catalog = (profile: string): string => `models:
  - name: gemma
    source: file://\${LLMGW_MODELS}/gemma-3-270m
    profiles:
      - name: p
        engine: llamacpp
        gpuClass: H100
${profile}`;

  it('reads ${LLMGW_MODELS} as the machine models folder', () => {
    process.env.LLMGW_MODELS = '/srv/models';
    try {
      const parsed = parseCatalog(catalog('        gpusPerNode: 1\n'));
      expect(parsed.ok && parsed.catalog.models[0]!.source).toBe('file:///srv/models/gemma-3-270m');
    } finally {
      delete process.env.LLMGW_MODELS;
    }
  });

  it('refuses a profile on more than one node, or with run-time adapters, saying why', () => {
    const twoNodes = parseCatalog(catalog('        tensorParallel: 2\n        gpusPerNode: 1\n        nodes: 2\n'));
    expect(twoNodes.ok ? '' : twoNodes.errors.map((e) => e.message).join('\n')).toMatch(/llamacpp runs on one node/);
    const adapters = parseCatalog(catalog('        gpusPerNode: 1\n        adapters: { maxLoaded: 2, maxRank: 16 }\n'));
    expect(adapters.ok ? '' : adapters.errors.map((e) => e.message).join('\n')).toMatch(/LoRA adapters only at start/);
  });
});
