// A file:// source of GGUF files pinned to their digest at deploy, and each agent's check that
// the bytes an engine is about to read are still the pinned ones.
import { create } from '@bufbuild/protobuf';
import { createHash } from 'node:crypto';
import { mkdtempSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { pinModelSource } from '../../activities/weights-pin.js';
import { createFilePinCheck } from '../../agent/weights/file-pin.js';
import { FailureType } from '../../common/failures.js';
import { formatModelSource, isPinned, parseModelSource } from '../../common/model-source.js';
import { EngineProfileSchema, StartShardSchema } from '../../proto/gen/llmgw/v1/shard_pb.js';

const DIGEST = `sha256:${'c'.repeat(64)}`;

function ggufDir(content = 'GGUF v3'): string {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-file-pin-'));
  writeFileSync(join(dir, 'model.gguf'), content);
  writeFileSync(join(dir, 'README.md'), 'not hashed');
  return dir;
}

const spec = (modelSource: string) =>
  create(StartShardSchema, { shardId: 's', nodeId: 'gpu-a', profile: create(EngineProfileSchema, { name: 'p', modelSource }) });

describe('pinned file:// sources', () => {
  it('writes and reads the digest after the path, and counts as pinned', () => {
    const parsed = parseModelSource(`file:///models/gemma@${DIGEST}`);
    expect(parsed).toEqual({ ok: true, source: { kind: 'file', path: '/models/gemma', digest: DIGEST } });
    expect(parsed.ok && formatModelSource(parsed.source)).toBe(`file:///models/gemma@${DIGEST}`);
    expect(parsed.ok && isPinned(parsed.source)).toBe(true);
    // An @ that is not a digest is part of the path.
    expect(parseModelSource('file:///models/a@b')).toEqual({ ok: true, source: { kind: 'file', path: '/models/a@b' } });
  });

  it('is pinned at deploy to its GGUF files, and left as written when it holds none or is not mounted', async () => {
    const dir = ggufDir();
    const pinned = await pinModelSource(`file://${dir}`);
    expect(pinned).toMatch(new RegExp(`^file://${dir}@sha256:[0-9a-f]{64}$`));
    expect(await pinModelSource(`file://${join(dir, 'model.gguf')}`)).toMatch(/@sha256:/);
    const plain = mkdtempSync(join(tmpdir(), 'llmgw-file-pin-'));
    writeFileSync(join(plain, 'model.safetensors'), 'x');
    expect(await pinModelSource(`file://${plain}`)).toBe(`file://${plain}`);
    expect(await pinModelSource('file:///nowhere/llmgw-model')).toBe('file:///nowhere/llmgw-model');
  });

  it('starts only the pinned bytes: the same files pass, changed or missing ones are refused saying what to do', async () => {
    const dir = ggufDir();
    const pinned = await pinModelSource(`file://${dir}`);
    const check = createFilePinCheck();
    await expect(check(spec(pinned))).resolves.toBeUndefined();
    await expect(check(spec('engine://x'))).resolves.toBeUndefined();
    writeFileSync(join(dir, 'model.gguf'), 'GGUF v3, other weights');
    const changed = await check(spec(pinned)).catch((e: unknown) => e as { type: string; message: string; nonRetryable: boolean });
    expect(changed).toMatchObject({ type: FailureType.WeightsUnavailable, nonRetryable: true });
    expect((changed as { message: string }).message).toMatch(/changed since the deployment pinned them .*--refresh-source/);
    await expect(check(spec(`file:///nowhere/llmgw-model@${DIGEST}`))).rejects.toThrow(/cannot be read here/);
  });

  it('refuses a folder whose GGUF is a link leading out of it, at deploy and on the agent', async () => {
    // The agent hashes these files as root: a link to a file elsewhere on the host is refused
    // (common/listing-paths.ts), even under the digest its bytes would give.
    const outside = mkdtempSync(join(tmpdir(), 'llmgw-file-pin-outside-'));
    writeFileSync(join(outside, 'other.gguf'), 'GGUF v3, a file the folder does not hold');
    const dir = mkdtempSync(join(tmpdir(), 'llmgw-file-pin-'));
    symlinkSync(join(outside, 'other.gguf'), join(dir, 'model.gguf'));
    const sha = (text: string) => createHash('sha256').update(text).digest('hex');
    const digest = `sha256:${sha(`model.gguf ${sha('GGUF v3, a file the folder does not hold')}\n`)}`;
    const refusal =
      /^file:\/\/.*: its listing holds "model\.gguf", which is a link that leads out of the folder, to .*other\.gguf; .*make .* hold the model's files themselves/;
    const atDeploy = await pinModelSource(`file://${dir}`).catch(
      (e: unknown) => e as { type: string; message: string; nonRetryable: boolean },
    );
    expect(atDeploy).toMatchObject({ type: FailureType.WeightsUnavailable, nonRetryable: true });
    expect((atDeploy as { message: string }).message).toMatch(refusal);
    const onAgent = await createFilePinCheck()(spec(`file://${dir}@${digest}`)).catch(
      (e: unknown) => e as { type: string; message: string },
    );
    expect(onAgent).toMatchObject({ type: FailureType.WeightsUnavailable });
    expect((onAgent as { message: string }).message).toMatch(refusal);
    // A link within the folder is the folder's own file.
    const within = mkdtempSync(join(tmpdir(), 'llmgw-file-pin-'));
    writeFileSync(join(within, 'model-v2.gguf'), 'GGUF v3');
    symlinkSync('model-v2.gguf', join(within, 'model.gguf'));
    expect(await pinModelSource(`file://${within}`)).toMatch(/@sha256:/);
  });
});
