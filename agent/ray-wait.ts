// The agent's Ray wait: before rank 0 of a Ray-launched replica starts its engine, poll
// `ray status` until the cluster has every node. Agent side; the supervisor calls it
// (options.waitForRay) between the Ray head and the engine.
//
// vLLM places its workers on the Ray cluster as it finds it at start-up and fails rather
// than wait for a late node, so the engine must not start before every rank has joined.
import { spawn } from 'node:child_process';
import { ApplicationFailure } from '@temporalio/common';
import { FailureType } from '../common/failures.js';
import type { StartShard } from '../proto/gen/llmgw/v1/shard_pb.js';
import { parseRayStatusNodeCount, rayStatusArgs } from './engines/ray.js';
import type { ProcessSpec } from './engines/types.js';
import { DEFAULT_STARTUP_TIMEOUT_S } from './supervisor/watch/wait-healthy.js';

export interface RayWaitOptions {
  /** How to invoke Ray here; default ['ray'] (the same as the engine context's rayCommand). */
  rayCommand?: string[];
  log?: (line: string) => void;
  /** Pause between two `ray status` calls; default 1000 ms (one call itself takes about 2 s). */
  pollMs?: number;
  /**
   * One `ray status` is cut off after this long. Against an address where no GCS answers
   * yet it waits about 40 s before it gives up; a later call may find the head up.
   */
  statusTimeoutMs?: number;
}

export type RayWait = (spec: StartShard, process: ProcessSpec, signal: AbortSignal) => Promise<void>;

const DEFAULT_POLL_MS = 1000;
const DEFAULT_STATUS_TIMEOUT_MS = 15_000;
/** What an error quotes of the last `ray status`: enough to see why, not a whole traceback. */
const QUOTED_LINES = 3;

interface StatusCall {
  code: number | null;
  stdout: string;
  stderr: string;
  /** Set when the call was cut off (its own timeout, or the wait's end) rather than exiting. */
  cut?: string;
}

export function createRayWait(opts: RayWaitOptions = {}): RayWait {
  const command = opts.rayCommand ?? ['ray'];
  const log = opts.log ?? (() => undefined);
  const pollMs = opts.pollMs ?? DEFAULT_POLL_MS;
  const statusTimeoutMs = opts.statusTimeoutMs ?? DEFAULT_STATUS_TIMEOUT_MS;

  return async (spec, proc, signal) => {
    const want = proc.waitForRayNodes ?? 0;
    const address = proc.rayAddress;
    if (!address) {
      throw ApplicationFailure.nonRetryable(
        `shard ${spec.shardId}: its ${proc.role} must wait for ${want} Ray node(s) but names no Ray address`,
        FailureType.InvalidSpec,
      );
    }
    const timeoutS = spec.startupTimeoutSeconds || spec.profile?.startupTimeoutSeconds || DEFAULT_STARTUP_TIMEOUT_S;
    const startedAt = Date.now();
    const deadline = startedAt + timeoutS * 1000;
    const argv = [...command, ...rayStatusArgs(address)];
    let count = 0;
    // What the last `ray status` that exited said, and whether a later one was cut off: the
    // call cut short by the deadline itself must not hide the last real answer.
    let answer: string | undefined;
    let cutAfter: string | undefined;
    const lastWords = (): string => {
      const shown = `\`${argv.join(' ')}\``;
      if (answer === undefined) return cutAfter === undefined ? `${shown} was never run` : `${shown} got ${cutAfter}`;
      return `last ${shown}: ${answer}${cutAfter ? `; the call after it got ${cutAfter}` : ''}`;
    };

    const abandoned = (): ApplicationFailure =>
      ApplicationFailure.retryable(
        `shard ${spec.shardId}: wait for the Ray cluster at ${address} abandoned (${count} of ${want} nodes): ${reasonText(signal.reason)}`,
      );

    for (;;) {
      if (signal.aborted) throw abandoned();
      const remaining = deadline - Date.now();
      if (remaining <= 0) {
        throw ApplicationFailure.nonRetryable(
          `shard ${spec.shardId}: the Ray cluster at ${address} has ${count} of ${want} nodes after ${timeoutS} s (the startup timeout); ${lastWords()}`,
          FailureType.StartupTimeout,
        );
      }
      const call = await runStatus(argv, Math.min(statusTimeoutMs, remaining), signal);
      if (signal.aborted) throw abandoned();
      if (call.cut !== undefined) {
        cutAfter = call.cut;
        continue;
      }
      answer = describeCall(call);
      cutAfter = undefined;
      const seen = call.code === 0 ? parseRayStatusNodeCount(call.stdout) : 0;
      if (seen !== count) log(`shard ${spec.shardId}: the Ray cluster at ${address} has ${seen} of ${want} nodes`);
      count = seen;
      if (count >= want) {
        log(`shard ${spec.shardId}: all ${want} Ray nodes joined at ${address} after ${((Date.now() - startedAt) / 1000).toFixed(1)} s`);
        return;
      }
      await sleep(Math.min(pollMs, Math.max(0, deadline - Date.now())), signal);
    }
  };
}

/** Runs one `ray status`; never rejects except when Ray cannot be run at all. */
function runStatus(argv: string[], timeoutMs: number, signal: AbortSignal): Promise<StatusCall> {
  return new Promise((resolve, reject) => {
    const [program, ...args] = argv;
    const child = spawn(program!, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    let cut: string | undefined;
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
    const stop = (why: string): void => {
      cut ??= why;
      child.kill('SIGKILL');
    };
    const timer = setTimeout(() => stop(`no answer within ${seconds(timeoutMs)} s`), timeoutMs);
    const onAbort = (): void => stop('the wait was abandoned');
    signal.addEventListener('abort', onAbort, { once: true });
    const done = (): void => {
      clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
    };
    child.once('error', (error: NodeJS.ErrnoException) => {
      done();
      if (error.code === 'ENOENT') {
        reject(
          ApplicationFailure.nonRetryable(
            `cannot run \`${argv.join(' ')}\`: ${program} not found (is Ray installed on this host?)`,
            FailureType.InvalidSpec,
          ),
        );
      } else {
        resolve({ code: null, stdout, stderr: `${stderr}${error.message}`, cut });
      }
    });
    child.once('close', (code) => {
      done();
      resolve({ code, stdout, stderr, cut });
    });
  });
}

function seconds(ms: number): string {
  return ms < 10_000 ? (ms / 1000).toFixed(1) : String(Math.round(ms / 1000));
}

/** One answered call in a line: its exit, then the node list or the end of its error. */
function describeCall(call: StatusCall): string {
  const how = call.code === 0 ? 'exit 0' : `exit ${call.code ?? 'by signal'}`;
  const text = (call.code === 0 ? call.stdout : call.stderr.trim() || call.stdout).trim();
  const lines = text.split(/\r?\n/).filter((line) => line.trim() !== '');
  const quoted = call.code === 0 ? nodeStatusLines(lines) : lines.slice(-QUOTED_LINES);
  return `${how}${quoted.length ? `: ${quoted.join(' | ')}` : ', no output'}`;
}

/** From a successful `ray status`, the node list (what the count was read from), or its first lines. */
function nodeStatusLines(lines: string[]): string[] {
  const start = lines.indexOf('Node status');
  const end = lines.indexOf('Resources');
  if (start < 0) return lines.slice(0, QUOTED_LINES);
  return lines.slice(start + 2, end > start ? end : undefined).map((line) => line.trim());
}

function reasonText(reason: unknown): string {
  return reason instanceof Error ? reason.message : String(reason ?? 'aborted');
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const onAbort = (): void => {
      clearTimeout(timer);
      resolve();
    };
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal.addEventListener('abort', onAbort, { once: true });
  });
}
