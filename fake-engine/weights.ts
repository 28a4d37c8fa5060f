// The fake engine's weights mode (`--weights DIR`): like a real engine it refuses to start
// when the directory it is given is missing, empty or incomplete (a snapshot link whose blob
// is not there), and it loads for a time proportional to the bytes there. Engine side.
import { readdirSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';

/** Reading speed of the simulated load, bytes per second (`--weights-load-rate`). */
export const DEFAULT_WEIGHTS_LOAD_RATE = 2e9;

/** The bytes of the weights at `dir`; throws a message naming what is missing. */
export function weightsBytes(dir: string): { bytes: number; files: number } {
  let top;
  try {
    top = statSync(dir);
  } catch {
    throw new Error(`weights directory ${dir} does not exist`);
  }
  if (!top.isDirectory()) throw new Error(`weights path ${dir} is not a directory`);
  let bytes = 0;
  let files = 0;
  const walk = (at: string): void => {
    for (const entry of readdirSync(at, { withFileTypes: true })) {
      const path = join(at, entry.name);
      let stat;
      try {
        // Follows the snapshot's links to their blobs: a link without its blob is an incomplete revision.
        stat = statSync(path);
      } catch {
        throw new Error(`weights in ${dir} are incomplete: ${relative(dir, path)} points at nothing`);
      }
      if (stat.isDirectory()) walk(path);
      else {
        bytes += stat.size;
        files++;
      }
    }
  };
  walk(dir);
  if (files === 0) throw new Error(`weights directory ${dir} is empty`);
  return { bytes, files };
}
