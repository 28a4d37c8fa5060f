// The digest that pins a file:// source holding GGUF files: SHA-256 over each .gguf's name and
// SHA-256, so a model replaced in place (same path, other bytes) is caught. Read on the control
// worker at deploy (activities/weights-pin.ts) and on the agent before start (agent/weights/
// file-pin.ts). Only GGUF is hashed: a folder of safetensors is used in place unpinned, since
// reading hundreds of gigabytes at every deploy would cost more than it guards.
import { createHash } from 'node:crypto';
import { createReadStream, readdirSync, statSync } from 'node:fs';
import { basename, join } from 'node:path';
import { checkFolderFiles } from './listing-paths.js';

/** The .gguf files a file:// path stands for: itself, or the ones directly in it; [] if none. */
export function ggufFilesAt(path: string): string[] {
  const stat = statSync(path);
  if (stat.isFile()) return path.endsWith('.gguf') ? [path] : [];
  const files = readdirSync(path)
    .filter((name) => name.endsWith('.gguf'))
    .sort()
    .map((name) => join(path, name));
  // The same check as every fetched listing's: the agent reads these as root.
  checkFolderFiles(`file://${path}`, path, files);
  return files;
}

async function sha256Of(file: string): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(file, { highWaterMark: 4 * 1024 * 1024 })) hash.update(chunk as Buffer);
  return hash.digest('hex');
}

/** `sha256:<hex>` over the GGUF files at `path`, or undefined when it holds none. */
export async function ggufDigest(path: string): Promise<string | undefined> {
  const files = ggufFilesAt(path);
  if (files.length === 0) return undefined;
  const lines: string[] = [];
  for (const file of files) lines.push(`${basename(file)} ${await sha256Of(file)}\n`);
  return `sha256:${createHash('sha256').update(lines.join('')).digest('hex')}`;
}
