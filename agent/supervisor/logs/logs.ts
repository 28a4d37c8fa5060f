// Per-shard engine log files. Agent side. The engine writes straight into its file: a pipe
// through the agent would break when the agent dies, and take the engine down with it.
import { appendFileSync, chmodSync, closeSync, fstatSync, openSync, readSync } from 'node:fs';
import { copyFile, stat, truncate } from 'node:fs/promises';
import { redactedSummary } from '../../../common/redact.js';

const TAIL_WINDOW_BYTES = 64 * 1024;
/** Lines searched, from the end, for one that is not blank. */
const SUMMARY_SEARCH_LINES = 20;

/**
 * What a failure (ShardStatus.last_log_lines, EngineExited details and messages) carries of an
 * engine's log: at most one line, redacted (common/redact.ts). Failures travel into Temporal's
 * histories, where whatever an engine printed (a token in a debug dump) would be kept and
 * exported; the log itself stays on the host and is read through the admin API.
 */
export function failureLogLines(file: string): string[] {
  const summary = redactedSummary(tailLines(file, SUMMARY_SEARCH_LINES));
  return summary ? [summary] : [];
}

/** Appends one line of the agent's own; the file is kept 0600 (an older agent's 0644 is tightened). */
export function appendLogLine(file: string, line: string): void {
  appendFileSync(file, `${line}\n`, { mode: 0o600 });
  chmodSync(file, 0o600);
}

/**
 * Bounds the log by copy-truncate: the file is copied to `<file>.1` and truncated in place.
 * The engine keeps its O_APPEND descriptor, so its next write lands at the new end, where a
 * rename would leave it writing into the old file for ever. Returns true when it truncated.
 * Asynchronous (libuv's thread pool): copying a large log must not stall the event loop,
 * which carries health probes and Temporal's heartbeats.
 */
export async function enforceLogLimit(file: string, maxBytes: number): Promise<boolean> {
  let size: number;
  try {
    size = (await stat(file)).size;
  } catch {
    return false;
  }
  if (size <= maxBytes) return false;
  await copyFile(file, `${file}.1`);
  await truncate(file, 0);
  return true;
}

/** The last `n` lines, reading at most the last 64 KiB; [] when the file is missing. */
export function tailLines(file: string, n: number): string[] {
  if (n <= 0) return [];
  let fd: number;
  try {
    fd = openSync(file, 'r');
  } catch {
    return [];
  }
  try {
    const size = fstatSync(fd).size;
    const start = Math.max(0, size - TAIL_WINDOW_BYTES);
    const buf = Buffer.alloc(size - start);
    let read = 0;
    while (read < buf.length) {
      const got = readSync(fd, buf, read, buf.length - read, start + read);
      if (got === 0) break;
      read += got;
    }
    const lines = buf.subarray(0, read).toString('utf8').split('\n');
    // A window that starts mid-file starts mid-line: that fragment is not a line.
    if (start > 0) lines.shift();
    if (lines.at(-1) === '') lines.pop();
    return lines.slice(-n);
  } finally {
    closeSync(fd);
  }
}

export function adoptionLine(nodeId: string, pid: number, at: Date): string {
  return `--- llmgw agent ${nodeId} adopted this engine (pid ${pid}) at ${at.toISOString()}; earlier output is above and was not streamed ---`;
}
