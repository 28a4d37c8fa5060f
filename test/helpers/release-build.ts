// Another commit of llmgw, built beside this checkout for the cross-release upgrade test: the
// commit's files (git archive) under .llmgw/builds/<commit>/, with this checkout's node_modules
// and compiled by its TypeScript. Built once per commit and machine; returns its bin/llmgw.js.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { join, resolve } from 'node:path';

const ROOT = resolve(__dirname, '../..');

export interface Release {
  version: string;
  commit: string;
}

/** The newest release in releases.json, if any was cut. */
export function latestRelease(): Release | undefined {
  const table = JSON.parse(readFileSync(join(ROOT, 'releases.json'), 'utf8')) as { releases: Release[]; beforeReleases?: string };
  return table.releases[table.releases.length - 1];
}

/** The last commit before versioned releases (runs of its builds are moved by ending them). */
export function beforeReleases(): string {
  return (JSON.parse(readFileSync(join(ROOT, 'releases.json'), 'utf8')) as { beforeReleases: string }).beforeReleases;
}

export function buildCommit(commit: string): string {
  const dir = join(ROOT, '.llmgw/builds', commit.slice(0, 12));
  const bin = join(dir, 'bin/llmgw.js');
  if (existsSync(join(dir, 'dist/cli/main.js'))) return bin;
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const archive = execFileSync('git', ['archive', '--format=tar', commit], { cwd: ROOT, maxBuffer: 512 * 1024 * 1024 });
  execFileSync('tar', ['-x', '-C', dir], { input: archive });
  symlinkSync(join(ROOT, 'node_modules'), join(dir, 'node_modules'));
  execFileSync(process.execPath, [join(ROOT, 'node_modules/typescript/bin/tsc'), '-p', 'tsconfig.build.json'], {
    cwd: dir,
    stdio: 'inherit',
  });
  return bin;
}
