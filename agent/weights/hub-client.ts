// The agent's end of the Hugging Face Hub protocol, through @huggingface/hub: the files of a
// commit with their digests, and a file's bytes from an offset (a range request, so a cut
// download resumes). The endpoint is the host's HF_ENDPOINT and the token its HF_TOKEN.
import { downloadFile, listFiles } from '@huggingface/hub';

export interface RemoteFile {
  path: string;
  size: number;
  /** The name the HF cache gives its blob: the LFS sha256, or the git blob id. */
  etag: string;
  /** LFS files: the sha256 of the content; others: undefined (their etag is the git blob id). */
  sha256?: string;
}

export interface HubEndpoint {
  hubUrl?: string;
  accessToken?: string;
}

/** The host's hub settings: HF_ENDPOINT and HF_TOKEN (a secret that stays on the host). */
export function hostHubEndpoint(env: NodeJS.ProcessEnv = process.env): HubEndpoint {
  return {
    ...(env.HF_ENDPOINT ? { hubUrl: env.HF_ENDPOINT.replace(/\/+$/, '') } : {}),
    ...(env.HF_TOKEN ? { accessToken: env.HF_TOKEN } : {}),
  };
}

export async function listCommitFiles(endpoint: HubEndpoint, repo: string, commit: string): Promise<RemoteFile[]> {
  const files: RemoteFile[] = [];
  for await (const entry of listFiles({ repo, revision: commit, recursive: true, ...endpoint })) {
    if (entry.type !== 'file') continue;
    if (entry.lfs) files.push({ path: entry.path, size: entry.lfs.size, etag: entry.lfs.oid, sha256: entry.lfs.oid });
    else if (entry.oid) files.push({ path: entry.path, size: entry.size, etag: entry.oid });
    else throw new Error(`the hub lists ${repo}@${commit}/${entry.path} without a digest; it cannot be verified`);
  }
  return files;
}

/** The bytes of `path` at `commit` from `offset` on, as a web stream. */
export async function openFileFrom(
  endpoint: HubEndpoint,
  repo: string,
  commit: string,
  file: RemoteFile,
  offset: number,
): Promise<ReadableStream<Uint8Array>> {
  const blob = await downloadFile({
    repo,
    path: file.path,
    revision: commit,
    xet: false,
    // The listing already gave size and digest: no probe request per file (with the
    // library's default hub, it probes as usual).
    ...(endpoint.hubUrl
      ? { downloadInfo: { etag: file.etag, size: file.size, url: resolveUrl(endpoint.hubUrl, repo, commit, file.path) } }
      : {}),
    ...endpoint,
  });
  if (!blob) throw new Error(`${repo}@${commit} has no file ${file.path}`);
  return (offset === 0 ? blob : blob.slice(offset)).stream() as ReadableStream<Uint8Array>;
}

function resolveUrl(base: string, repo: string, commit: string, path: string): string {
  return `${base}/${repo}/resolve/${encodeURIComponent(commit)}/${path.split('/').map(encodeURIComponent).join('/')}`;
}
