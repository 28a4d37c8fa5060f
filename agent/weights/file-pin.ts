// The agent's check of a pinned file:// source before an engine reads it: its GGUF files must
// still hash to the digest the control worker pinned at deploy, or the engine would serve other
// bytes than the signed revision names. Agent side; a digest is remembered per file state, so a
// restart of the same shard does not read the model again.
import { ApplicationFailure } from '@temporalio/common';
import { statSync } from 'node:fs';
import { ggufDigest, ggufFilesAt } from '../../common/file-digest.js';
import { FailureType } from '../../common/failures.js';
import { formatModelSource, modelSourceOf } from '../../common/model-source.js';
import type { StartShard } from '../../proto/gen/llmgw/v1/shard_pb.js';

/** What the files at a path look like without reading them: names, sizes, change times. */
function stateOf(path: string): string {
  return ggufFilesAt(path)
    .map((file) => {
      const stat = statSync(file);
      return `${file}:${stat.size}:${stat.mtimeMs}:${stat.ino}`;
    })
    .join('|');
}

export function createFilePinCheck(): (spec: StartShard) => Promise<void> {
  const known = new Map<string, { state: string; digest: string | undefined }>();
  return async (spec) => {
    const text = spec.profile?.modelSource;
    if (!text) return;
    const source = modelSourceOf(text);
    if (source.kind !== 'file' || source.digest === undefined) return;
    const refuse = (why: string): ApplicationFailure =>
      ApplicationFailure.nonRetryable(`${formatModelSource(source)} on ${spec.nodeId}: ${why}`, FailureType.WeightsUnavailable);
    let state: string;
    try {
      state = stateOf(source.path);
    } catch (error) {
      if (error instanceof ApplicationFailure) throw error;
      throw refuse(`cannot be read here (${error instanceof Error ? error.message : String(error)}); every host must mount it`);
    }
    let digest = known.get(source.path)?.state === state ? known.get(source.path)?.digest : undefined;
    if (digest === undefined) {
      digest = await ggufDigest(source.path);
      known.set(source.path, { state, digest });
    }
    if (digest !== source.digest)
      throw refuse(
        `its GGUF files changed since the deployment pinned them (now ${digest ?? 'none'}): restore them, or move the deployment to the new bytes with \`llmgw rollout NAME --refresh-source\``,
      );
  };
}
