// A stand-in Hugging Face Hub for tests and benchmarks: generated repositories served over the
// Hub's HTTP protocol (model info, tree listing, /resolve with ranges and the ETag headers), with
// a bandwidth limit, a count of the bytes it served, and a way to move a branch. Loopback only.
import { createHash, randomBytes } from 'node:crypto';
import { createReadStream, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** A file as the hub describes it: git blob id, and for LFS files the sha256 the hub shows as ETag. */
export interface HubFile {
  path: string;
  size: number;
  lfs: boolean;
  /** git's blob sha1 ("blob <size>\0" + content), the ETag of a file kept in git. */
  gitOid: string;
  sha256: string;
  diskPath: string;
}

export interface HubRepoSpec {
  /** ORG/NAME */
  repo: string;
  files: { path: string; size: number }[];
  /** Requests without `Authorization: Bearer <token>` are refused with 401, as for a gated repo. */
  token?: string;
}

interface Repo {
  refs: Record<string, string>;
  commits: Record<string, HubFile[]>;
  token?: string;
}

export interface StandInHub {
  url: string;
  /** Adds a repository with generated contents; returns the commit `main` points at. */
  addRepo(spec: HubRepoSpec): string;
  /** A new commit on `main` in which `change` files get new contents (others unchanged). */
  moveMain(repo: string, change: string[]): string;
  filesAt(repo: string, commit: string): HubFile[];
  /** Body bytes sent for /resolve requests since start (or the last reset), per file path. */
  bytesServed(): number;
  bytesServedFor(path: string): number;
  resetCounter(): void;
  /** Bytes per second over all responses together; 0 is unlimited. */
  setBandwidth(bytesPerSecond: number): void;
  close(): Promise<void>;
}

/** Files of this size or more, and every safetensors file, are LFS files, as on the hub. */
const LFS_FROM_BYTES = 10 * 1024;

function gitOidOf(content: Buffer): string {
  return createHash('sha1').update(`blob ${content.length}\0`).update(content).digest('hex');
}

export interface StandInHubOptions {
  bytesPerSecond?: number;
  /** Where its files are kept (the system's temp dir when absent): a benchmark puts them on tmpfs, off the client's disk, as a remote hub's are. */
  filesIn?: string;
}

export async function startStandInHub(options: StandInHubOptions = {}): Promise<StandInHub> {
  const dir = mkdtempSync(join(options.filesIn ?? tmpdir(), 'llmgw-stand-in-hub-'));
  const repos: Record<string, Repo> = {};
  let bandwidth = options.bytesPerSecond ?? 0;
  let served = 0;
  let servedByPath: Record<string, number> = {};
  // The time the shared link is next free: each chunk books its transfer time after it.
  let linkFreeAt = Date.now();
  let generation = 0;

  function generate(repo: string, path: string, size: number): HubFile {
    const diskPath = join(dir, `${generation++}-${path.replace(/[^A-Za-z0-9._-]/g, '_')}`);
    const content = path.endsWith('.json') ? jsonContent(repo, path, size, generation) : randomBytes(size);
    writeFileSync(diskPath, content);
    const lfs = size >= LFS_FROM_BYTES || path.endsWith('.safetensors');
    return {
      path,
      size: content.length,
      lfs,
      gitOid: gitOidOf(content),
      sha256: createHash('sha256').update(content).digest('hex'),
      diskPath,
    };
  }

  function commitOf(files: HubFile[]): string {
    return createHash('sha1')
      .update(JSON.stringify(files.map((f) => [f.path, f.gitOid])))
      .update(String(generation++))
      .digest('hex');
  }

  async function send(res: ServerResponse, file: HubFile, start: number, end: number): Promise<void> {
    const stream = createReadStream(file.diskPath, { start, end, highWaterMark: 256 * 1024 });
    try {
      for await (const chunk of stream as AsyncIterable<Buffer>) {
        if (bandwidth > 0) {
          const now = Date.now();
          linkFreeAt = Math.max(now, linkFreeAt) + (chunk.length / bandwidth) * 1000;
          const wait = linkFreeAt - now;
          if (wait > 1) await new Promise((r) => setTimeout(r, wait));
        }
        if (res.destroyed) break;
        const ok = res.write(chunk);
        served += chunk.length;
        servedByPath[file.path] = (servedByPath[file.path] ?? 0) + chunk.length;
        if (!ok) {
          await new Promise<void>((resolve) => {
            const done = (): void => {
              res.off('drain', done).off('close', done);
              resolve();
            };
            res.on('drain', done).on('close', done);
          });
        }
      }
    } finally {
      stream.destroy();
    }
    res.end();
  }

  function refuse(res: ServerResponse, status: number, code: string, message: string): void {
    res.writeHead(status, { 'Content-Type': 'application/json', 'X-Error-Code': code, 'X-Error-Message': message });
    res.end(JSON.stringify({ error: message }));
  }

  function lookup(req: IncomingMessage, res: ServerResponse, repoName: string, rev: string): { repo: Repo; commit: string } | undefined {
    const repo = repos[repoName];
    if (!repo) {
      refuse(res, 401, 'RepoNotFound', `Repository Not Found for url: ${req.url}.`);
      return undefined;
    }
    if (repo.token !== undefined && req.headers.authorization !== `Bearer ${repo.token}`) {
      refuse(res, 401, 'GatedRepo', `Access to model ${repoName} is restricted. You must have access to it and be authenticated.`);
      return undefined;
    }
    const commit = rev === 'HEAD' ? repo.refs.main : (repo.refs[rev] ?? (repo.commits[rev] ? rev : undefined));
    if (commit === undefined) {
      refuse(res, 404, 'RevisionNotFound', `Invalid rev id: ${rev}`);
      return undefined;
    }
    return { repo, commit };
  }

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://hub');
    const parts = url.pathname.split('/').filter(Boolean).map(decodeURIComponent);
    // /api/models/ORG/NAME[/revision/REV | /tree/REV[/PATH]]
    if (parts[0] === 'api' && parts[1] === 'models' && parts.length >= 4) {
      const repoName = `${parts[2]}/${parts[3]}`;
      const what = parts[4];
      const rev = parts[5] ?? 'main';
      const found = lookup(req, res, repoName, what === undefined ? 'main' : rev);
      if (!found) return;
      const files = found.repo.commits[found.commit]!;
      if (what === undefined || what === 'revision') {
        res.writeHead(200, { 'Content-Type': 'application/json' });
        res.end(
          JSON.stringify({
            _id: createHash('sha1').update(repoName).digest('hex').slice(0, 24),
            id: repoName,
            modelId: repoName,
            author: parts[2],
            sha: found.commit,
            private: false,
            disabled: false,
            gated: found.repo.token !== undefined ? 'manual' : false,
            downloads: 0,
            likes: 0,
            tags: [],
            library_name: 'transformers',
            lastModified: new Date(0).toISOString(),
            createdAt: new Date(0).toISOString(),
            siblings: files.map((f) => ({ rfilename: f.path })),
          }),
        );
        return;
      }
      if (what === 'tree') {
        const under = parts.slice(6).join('/');
        const listed = files.filter((f) => under === '' || f.path.startsWith(`${under}/`));
        res.writeHead(200, { 'Content-Type': 'application/json' });
        res.end(
          JSON.stringify(
            listed.map((f) => ({
              type: 'file',
              oid: f.gitOid,
              size: f.size,
              path: f.path,
              ...(f.lfs ? { lfs: { oid: f.sha256, size: f.size, pointerSize: 134 } } : {}),
            })),
          ),
        );
        return;
      }
    }
    // /ORG/NAME/resolve/REV/PATH
    if (parts.length >= 5 && parts[2] === 'resolve') {
      const repoName = `${parts[0]}/${parts[1]}`;
      const found = lookup(req, res, repoName, parts[3]!);
      if (!found) return;
      const path = parts.slice(4).join('/');
      const file = found.repo.commits[found.commit]!.find((f) => f.path === path);
      if (!file) {
        refuse(res, 404, 'EntryNotFound', `${path} does not exist on "${parts[3]}"`);
        return;
      }
      const etag = `"${file.lfs ? file.sha256 : file.gitOid}"`;
      const headers: Record<string, string | number> = {
        'Accept-Ranges': 'bytes',
        'Content-Type': 'application/octet-stream',
        ETag: etag,
        'X-Repo-Commit': found.commit,
        ...(file.lfs ? { 'X-Linked-Etag': etag, 'X-Linked-Size': file.size } : {}),
      };
      const range = /^bytes=(\d+)-(\d*)$/.exec(req.headers.range ?? '');
      let start = 0;
      let end = file.size - 1;
      let status = 200;
      if (range) {
        start = Number(range[1]);
        end = range[2] ? Math.min(Number(range[2]), file.size - 1) : file.size - 1;
        if (start >= file.size && file.size > 0) {
          res.writeHead(416, { 'Content-Range': `bytes */${file.size}` });
          res.end();
          return;
        }
        status = 206;
        headers['Content-Range'] = `bytes ${start}-${end}/${file.size}`;
      }
      headers['Content-Length'] = file.size === 0 ? 0 : end - start + 1;
      res.writeHead(status, headers);
      if (req.method === 'HEAD' || file.size === 0) {
        res.end();
        return;
      }
      await send(res, file, start, end);
      return;
    }
    refuse(res, 404, 'NotFound', `no such endpoint: ${req.method} ${url.pathname}`);
  }

  const server = createServer((req, res) => {
    handle(req, res).catch((error: unknown) => {
      if (!res.headersSent) refuse(res, 500, 'Internal', String(error));
      else res.destroy();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;

  return {
    url: `http://127.0.0.1:${port}`,
    addRepo(spec) {
      const files = spec.files.map((f) => generate(spec.repo, f.path, f.size));
      const commit = commitOf(files);
      repos[spec.repo] = { refs: { main: commit }, commits: { [commit]: files }, ...(spec.token ? { token: spec.token } : {}) };
      return commit;
    },
    moveMain(repoName, change) {
      const repo = repos[repoName];
      if (!repo) throw new Error(`no repo ${repoName}`);
      const files = repo.commits[repo.refs.main!]!.map((f) => (change.includes(f.path) ? generate(repoName, f.path, f.size) : f));
      const commit = commitOf(files);
      repo.commits[commit] = files;
      repo.refs.main = commit;
      return commit;
    },
    filesAt(repoName, commit) {
      const files = repos[repoName]?.commits[commit];
      if (!files) throw new Error(`no commit ${commit} in ${repoName}`);
      return files;
    },
    bytesServed: () => served,
    bytesServedFor: (path) => servedByPath[path] ?? 0,
    resetCounter() {
      served = 0;
      servedByPath = {};
    },
    setBandwidth(bytesPerSecond) {
      bandwidth = bytesPerSecond;
      linkFreeAt = Date.now();
    },
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A small JSON file of exactly `size` bytes (or a little more), like a model's config. */
function jsonContent(repo: string, path: string, size: number, salt: number): Buffer {
  const base = JSON.stringify({ _name_or_path: repo, file: path, salt, architectures: ['LlamaForCausalLM'], pad: '' });
  const pad = Math.max(0, size - base.length);
  return Buffer.from(base.replace('"pad":""', `"pad":"${'x'.repeat(pad)}"`));
}
