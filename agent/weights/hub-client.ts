// The agent's end of the Hugging Face Hub protocol: the files of a commit with their digests
// (@huggingface/hub), and a file's bytes from an offset (a range request, so a cut download
// resumes). The endpoint is the host's HF_ENDPOINT and the token its HF_TOKEN.
import { HUB_URL, listFiles } from '@huggingface/hub';
import { Agent, interceptors, request } from 'undici';

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

/** A download's body from `from` on: `offset`, or 0 when the server ignored the range. */
export interface FileBody {
  from: number;
  body: AsyncIterable<Buffer>;
}

// Redirects are followed (the hub sends LFS files to a CDN); undici drops the Authorization
// header when a redirect leaves the hub's origin, so the token never reaches the CDN.
const dispatcher = new Agent({ connections: 16 }).compose(interceptors.redirect({ maxRedirections: 5 }));

/**
 * The bytes of `path` at `commit` from `offset` on (a range request). The listing and the
 * revision come from @huggingface/hub; the bytes through undici's request, whose Node stream
 * body measured 30-40% faster than the library's Blob over fetch (WHATWG streams) on the same
 * hub: 500 MB in 4 parallel files, 2.4-2.6 s against 3.3-3.9 s.
 */
export async function openFileFrom(
  endpoint: HubEndpoint,
  repo: string,
  commit: string,
  file: RemoteFile,
  offset: number,
  signal: AbortSignal,
): Promise<FileBody> {
  const url = `${endpoint.hubUrl ?? HUB_URL}/${repo}/resolve/${encodeURIComponent(commit)}/${file.path.split('/').map(encodeURIComponent).join('/')}`;
  const response = await request(url, {
    dispatcher,
    signal,
    headers: {
      ...(offset > 0 ? { range: `bytes=${offset}-` } : {}),
      ...(endpoint.accessToken ? { authorization: `Bearer ${endpoint.accessToken}` } : {}),
    },
  });
  if (response.statusCode === 206 && offset > 0) return { from: offset, body: response.body };
  if (response.statusCode === 200) return { from: 0, body: response.body };
  const said = (await response.body.text().catch(() => '')).slice(0, 300);
  throw Object.assign(new Error(`${url}: HTTP ${response.statusCode} ${said}`), { statusCode: response.statusCode });
}
