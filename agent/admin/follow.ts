// Following a shard's log for the admin API's TailLogs, within bounds. Agent side. An engine
// can write faster than anyone reads, and a follower can read slower than the network
// sends: both are bounded here, so a follow costs the agent a known amount of memory and CPU
// whatever the engine or the client does.
import { closeSync, openSync, readSync, statSync } from 'node:fs';

export const FOLLOW_LIMITS = {
  /** Follow streams open at once, over all clients. */
  maxFollows: 8,
  /** Bytes read per poll (every 300 ms): about 850 KiB/s per follow. */
  bytesPerPoll: 256 * 1024,
  /** Further behind than this, a follow skips to the end and says so. */
  maxLagBytes: 4 * 1024 * 1024,
  /** Longer lines are cut, saying how much. */
  maxLineChars: 16 * 1024,
  /** Lines a TailLogs may ask for first. */
  maxInitialLines: 5000,
  pollMs: 300,
} as const;

export function capLine(line: string, max: number = FOLLOW_LIMITS.maxLineChars): string {
  return line.length > max ? `${line.slice(0, max)}… [${line.length - max} characters cut]` : line;
}

export interface Follower {
  stop(): void;
}

/**
 * Polls `file` from its current end and hands complete lines to `write`, which returns false
 * when the stream is full (the follow then waits for `resume`). Copy-truncate rotation shows
 * up as the file getting shorter. `end` is called once when the file cannot be read.
 */
export function followFile(
  file: string,
  write: (lines: string[]) => boolean,
  hooks: { onResume(listener: () => void): void; end(): void },
): Follower {
  let offset = statSync(file).size;
  let partial = '';
  let paused = false;
  const timer = setInterval(() => {
    if (paused) return;
    try {
      const size = statSync(file).size;
      if (size < offset) offset = 0;
      if (size === offset) return;
      const lines: string[] = [];
      if (size - offset > FOLLOW_LIMITS.maxLagBytes) {
        lines.push(`--- ${size - offset} bytes skipped: the log grew faster than a follow may read; the file on the host has them ---`);
        offset = size;
        partial = '';
      } else {
        const fd = openSync(file, 'r');
        const buffer = Buffer.alloc(Math.min(size - offset, FOLLOW_LIMITS.bytesPerPoll));
        const read = readSync(fd, buffer, 0, buffer.length, offset);
        closeSync(fd);
        offset += read;
        const parts = (partial + buffer.subarray(0, read).toString('utf8')).split('\n');
        partial = parts.pop() ?? '';
        // A line that never ends must not grow without bound either.
        if (partial.length > FOLLOW_LIMITS.maxLineChars) {
          parts.push(partial);
          partial = '';
        }
        lines.push(...parts.map((line) => capLine(line)));
      }
      if (lines.length && !write(lines)) {
        paused = true;
        hooks.onResume(() => {
          paused = false;
        });
      }
    } catch {
      clearInterval(timer);
      hooks.end();
    }
  }, FOLLOW_LIMITS.pollMs);
  return { stop: () => clearInterval(timer) };
}
