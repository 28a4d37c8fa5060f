// The agent's end of the Hugging Face Hub protocol: the files of a commit with their digests
// (@huggingface/hub), and where a file's bytes are (fetched by download.ts with a range request,
// so a cut download resumes). The endpoint is the host's HF_ENDPOINT and the token its HF_TOKEN.
import { HUB_URL, listFiles } from '@huggingface/hub';
import { checkListing } from '../../common/listing-paths.js';

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
  checkListing(
    `${repo}@${commit}`,
    files,
    `The repository's owner must rename or remove that file; pin another commit meanwhile (llmgw rollout NAME)`,
  );
  return files;
}

/**
 * Where the bytes of `path` at `commit` are: the hub's /resolve URL, which redirects LFS files
 * to a CDN; with the token's header for the hub alone (http-get.ts keeps it from the CDN).
 */
export function hubFileRequest(endpoint: HubEndpoint, repo: string, commit: string, path: string): { url: string; authorization?: string } {
  const url = `${endpoint.hubUrl ?? HUB_URL}/${repo}/resolve/${encodeURIComponent(commit)}/${path.split('/').map(encodeURIComponent).join('/')}`;
  return { url, ...(endpoint.accessToken ? { authorization: `Bearer ${endpoint.accessToken}` } : {}) };
}
