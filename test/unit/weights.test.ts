// Weights, the pure parts: parsing catalog sources (and the catalog's refusals naming the
// field), the cache paths and engine command lines made from a pinned source, the fetch
// progress line, and the fake engine's check of the weights it is given.
import { mkdtempSync, mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { formatModelSource, isFetchedByLlmgw, isPinned, modelSourceOf, parseModelSource } from '../../common/model-source.js';
import { parseCatalog } from '../../catalog/load.js';
import { engineModelArg, localModelPath } from '../../agent/weights/cache-layout.js';
import { FetchProgress } from '../../agent/weights/progress.js';
import { buildEngineLaunch } from '../../agent/engines/index.js';
import { Engine } from '../../proto/gen/llmgw/v1/shard_pb.js';
import { weightsBytes } from '../../fake-engine/weights.js';
import { parseAgentFlags } from '../../agent/config.js';
import { ctx, shard } from '../helpers/engine-launch.js';

const COMMIT = '0123456789abcdef0123456789abcdef01234567';

describe('model sources', () => {
  it('parses the four schemes and formats them back', () => {
    for (const text of [
      'hf://meta-llama/Llama-3.1-8B-Instruct',
      `hf://meta-llama/Llama-3.1-8B-Instruct@${COMMIT}`,
      'hf://org/name@release/v2',
      's3://weights-bucket/llama/8b',
      `s3://weights-bucket/llama@sha256:${'a'.repeat(64)}`,
      'file:///mnt/models/llama',
      'engine://llmgw/fake-demo',
    ]) {
      const parsed = parseModelSource(text);
      expect(parsed.ok, text).toBe(true);
      if (parsed.ok) expect(formatModelSource(parsed.source)).toBe(text);
    }
    const pinned = parseModelSource(`hf://org/name@${COMMIT}`);
    const moving = parseModelSource('hf://org/name@main');
    expect(pinned.ok && isPinned(pinned.source)).toBe(true);
    expect(moving.ok && isPinned(moving.source)).toBe(false);
  });

  it('reads a bare hub id as hf:// and a bare absolute path as file://, and refuses other bare text, saying what to write', () => {
    const same = (bare: string, written: string): void => expect(parseModelSource(bare)).toEqual(parseModelSource(written));
    same('meta-llama/Llama-3.1-8B-Instruct', 'hf://meta-llama/Llama-3.1-8B-Instruct');
    same('org/name@main', 'hf://org/name@main');
    same('/mnt/models/llama', 'file:///mnt/models/llama');
    const refused = parseModelSource('gpt2');
    expect(refused.ok).toBe(false);
    if (!refused.ok) {
      expect(refused.message).toBe(
        'source "gpt2": a source without a scheme is a hub id ORG/NAME (as hf://ORG/NAME) or an absolute path (as file:///PATH); to hand it to the engine as written, unpinned and uncached, write engine://gpt2',
      );
    }
  });

  it('keeps what a revision of 0.2.0 carries: a bare source goes to the engine as it did, never fetched', () => {
    // Revisions made before pinning carry the catalog's text: their replicas, moved to this
    // release, are re-placed and scaled without a hub and start their engine as before.
    expect(modelSourceOf('meta-llama/Llama-3.1-8B-Instruct')).toEqual({ kind: 'hf', repo: 'meta-llama/Llama-3.1-8B-Instruct' });
    expect(isFetchedByLlmgw(modelSourceOf('meta-llama/Llama-3.1-8B-Instruct'))).toBe(false);
    expect(isFetchedByLlmgw(modelSourceOf(`hf://org/name@${COMMIT}`))).toBe(true);
    expect(modelSourceOf('gpt2')).toEqual({ kind: 'engine', name: 'gpt2' });
    expect(modelSourceOf('demo')).toEqual({ kind: 'engine', name: 'demo' });
    expect(() => modelSourceOf('gs://bucket/x')).toThrow(/unknown scheme/);
    expect(engineModelArg('meta-llama/Llama-3.1-8B-Instruct', '/var/lib/llmgw/weights')).toBe('meta-llama/Llama-3.1-8B-Instruct');
    expect(engineModelArg('gpt2', '/var/lib/llmgw/weights')).toBe('gpt2');
    expect(engineModelArg('engine://llmgw/fake-demo', '/var/lib/llmgw/weights')).toBe('llmgw/fake-demo');
  });

  it('refuses an unknown scheme and malformed sources, saying what is expected', () => {
    const refusal = (text: string): string => {
      const parsed = parseModelSource(text);
      if (parsed.ok) throw new Error(`${text} was accepted`);
      return parsed.message;
    };
    expect(refusal('gs://bucket/x')).toMatch(
      /unknown scheme "gs:\/\/" \(expected hf:\/\/, s3:\/\/, file:\/\/, engine:\/\/, or a bare hub id ORG\/NAME\)/,
    );
    expect(refusal('hf://just-a-name')).toMatch(/expected hf:\/\/ORG\/NAME/);
    expect(refusal('file://relative/path')).toMatch(/file:\/\/\/ABSOLUTE\/PATH/);
    expect(refusal('file:///mnt/../etc')).toMatch(/no "\.\."/);
    expect(refusal('engine://')).toMatch(/expected engine:\/\/NAME/);
  });

  it('is checked by catalog validation, naming the field', () => {
    // A catalog of one model whose weights come from `source`.
    const catalogOf = (source: string) =>
      parseCatalog(`models:
  - name: demo
    source: ${source}
    profiles:
      - { name: p, engine: fake, gpuClass: H100, gpusPerNode: 1 }
`);
    const result = catalogOf('gs://bucket/llama');
    expect(result.ok).toBe(false);
    if (!result.ok) {
      expect(result.errors.map((e) => `${e.path}: ${e.message}`).join('\n')).toMatch(/models\[0\]\.source.*unknown scheme "gs:\/\/"/);
    }
    const s3 = catalogOf('s3://weights/llama');
    expect(s3.ok).toBe(true);
  });
});

describe('engines and the cache', () => {
  const weightsDir = '/var/lib/llmgw/weights';
  const source = `hf://meta-llama/Llama-3.1-8B-Instruct@${COMMIT}`;
  const snapshot = `${weightsDir}/models--meta-llama--Llama-3.1-8B-Instruct/snapshots/${COMMIT}`;

  it('runs vLLM and SGLang from the local snapshot, offline, and leaves a bare hub id to the engine', () => {
    expect(localModelPath(source, weightsDir)).toBe(snapshot);
    expect(localModelPath('file:///mnt/models/llama', weightsDir)).toBe('/mnt/models/llama');
    expect(localModelPath('meta-llama/Llama-3.1-8B-Instruct', weightsDir)).toBeUndefined();

    const vllm = buildEngineLaunch(shard({ engine: Engine.VLLM, modelSource: source }), ctx({ weightsDir })).processes[0]!;
    expect(vllm.argv.slice(0, 5)).toEqual(['vllm', 'serve', snapshot, '--served-model-name', 'llama']);
    expect(vllm.env.HF_HUB_OFFLINE).toBe('1');
    const sglang = buildEngineLaunch(shard({ engine: Engine.SGLANG, modelSource: source }), ctx({ weightsDir })).processes[0]!;
    expect(sglang.argv[sglang.argv.indexOf('--model-path') + 1]).toBe(snapshot);
    expect(sglang.argv[sglang.argv.indexOf('--served-model-name') + 1]).toBe('llama');
    const fake = buildEngineLaunch(shard({ engine: Engine.FAKE, modelSource: source }), ctx({ weightsDir })).processes[0]!;
    expect(fake.argv[fake.argv.indexOf('--weights') + 1]).toBe(snapshot);

    const legacy = buildEngineLaunch(shard({ engine: Engine.VLLM, modelSource: 'meta-llama/Llama-3.1-8B-Instruct' }), ctx({ weightsDir }))
      .processes[0]!;
    expect(legacy.argv[2]).toBe('meta-llama/Llama-3.1-8B-Instruct');
    expect(legacy.env.HF_HUB_OFFLINE).toBeUndefined();
  });

  it('reads --weights-dir and --weights-budget as a size or a share of the disk', () => {
    expect(parseAgentFlags({ nodeId: 'a', stateDir: '/tmp/a' }).weightsDir).toBe('/tmp/a/weights');
    expect(parseAgentFlags({ nodeId: 'a', weightsBudget: '500G' }).weightsBudget).toEqual({ bytes: 500 * 1024 ** 3 });
    expect(parseAgentFlags({ nodeId: 'a', weightsBudget: '80%' }).weightsBudget).toEqual({ percent: 80 });
    expect(() => parseAgentFlags({ nodeId: 'a', weightsBudget: '120%' })).toThrow(
      /--weights-budget: a share of the disk is over 0% and at most 100%/,
    );
  });

  it('shows progress as percent, bytes, rate, time left and the files in flight', () => {
    let now = 0;
    const progress = new FetchProgress('org/name', COMMIT, () => now);
    progress.begin(10e9, 4);
    progress.fileDone(2e9);
    progress.fileStarted('model-00002.safetensors');
    for (let i = 1; i <= 5; i++) {
      now = i * 1000;
      progress.bytes(1e9);
    }
    const details = progress.details();
    expect(details.bytesDone).toBe(7e9);
    expect(details.rate).toBe(1e9);
    expect(details.etaSeconds).toBe(3);
    expect(details.summary).toBe('Fetching 70% · 7.0 GB of 10.0 GB · 1.0 GB/s · 3s left · model-00002.safetensors');
  });

  it('the fake engine refuses missing, empty and incomplete weights, and counts complete ones', () => {
    const dir = mkdtempSync(join(tmpdir(), 'llmgw-fake-weights-'));
    expect(() => weightsBytes(join(dir, 'nope'))).toThrow(/does not exist/);
    mkdirSync(join(dir, 'snap'));
    expect(() => weightsBytes(join(dir, 'snap'))).toThrow(/is empty/);
    writeFileSync(join(dir, 'blob'), Buffer.alloc(1000));
    symlinkSync('../blob', join(dir, 'snap', 'model.safetensors'));
    expect(weightsBytes(join(dir, 'snap'))).toEqual({ bytes: 1000, files: 1 });
    symlinkSync('../missing-blob', join(dir, 'snap', 'model-2.safetensors'));
    expect(() => weightsBytes(join(dir, 'snap'))).toThrow(/incomplete: model-2\.safetensors points at nothing/);
  });
});
