// Pinning an S3 source, on the control worker: the objects under the prefix now, named by a
// digest over their paths, sizes and ETags, become `s3://BUCKET/PREFIX@sha256:…`, part of the
// signed revision. Agents list the prefix again and fetch only when it still has that digest.
// The store and credentials are the control worker's (its AWS_* environment).
import { ApplicationFailure } from '@temporalio/client';
import { FailureType } from '../common/failures.js';
import { formatModelSource, type S3Source } from '../common/model-source.js';
import { explainS3Error, listS3Objects, s3ClientFromEnv, s3Digest, s3FolderPrefix, shownS3Endpoint } from '../common/s3-store.js';

export async function pinS3Source(source: S3Source, env: NodeJS.ProcessEnv = process.env): Promise<string> {
  const location = formatModelSource({ kind: 's3', bucket: source.bucket, prefix: source.prefix });
  const client = s3ClientFromEnv(env);
  try {
    const objects = await listS3Objects(client, source.bucket, source.prefix);
    if (objects.length === 0) {
      throw ApplicationFailure.nonRetryable(
        `source ${location}: no objects under s3://${source.bucket}/${s3FolderPrefix(source.prefix)} at ${shownS3Endpoint(env)}; upload the model's files there, or correct the prefix`,
        FailureType.WeightsUnavailable,
      );
    }
    return formatModelSource({ ...source, digest: s3Digest(objects) });
  } catch (error) {
    if (error instanceof ApplicationFailure) throw error;
    const explained = explainS3Error(error, `source ${location}`, 'the control worker', env);
    if (explained) throw ApplicationFailure.nonRetryable(explained, FailureType.WeightsUnavailable);
    throw error;
  } finally {
    client.destroy();
  }
}
