// Upkeep of the agent's files, on timers and never in the way of a start or a stop: each
// running shard's log is bounded by copy-truncate, and the logs and set-aside corrupt specs
// of shards this agent no longer runs are deleted once older than the retention. Agent side;
// all file work is asynchronous, off the event loop.
import { readdir, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { errorText, type SupervisorCore } from '../core.js';
import { enforceLogLimit } from './logs.js';
import { logsDir, shardsDir } from '../spec-store.js';

export async function enforceLogLimits(core: SupervisorCore): Promise<void> {
  const max = core.options.maxLogBytes;
  for (const shard of [...core.shards.values()]) {
    try {
      if (await enforceLogLimit(shard.logFile, max))
        core.log(`shard ${shard.spec.shardId}: log over ${max} bytes; kept the previous part as ${shard.logFile}.1`);
    } catch (err) {
      core.log(`shard ${shard.spec.shardId}: could not bound its log: ${errorText(err)}`, 'warn');
    }
  }
}

/** The shard a file of the state dir belongs to: `<id>.log`, `<id>.log.1`, `<id>.json.corrupt`. */
function shardOf(name: string): string | undefined {
  return /^(.+)\.(?:log(?:\.1)?|json\.corrupt)$/.exec(name)?.[1];
}

/**
 * Deletes the logs and corrupt specs of shards this agent does not run whose last change is
 * older than the retention. A shard's files are kept while it runs, however old. Returns the
 * paths deleted.
 */
export async function sweepOldFiles(core: SupervisorCore, now = Date.now()): Promise<string[]> {
  // Before recovery every shard looks stopped: its running engines' logs would go too.
  if (!core.recovered) return [];
  const cutoff = now - core.options.logRetentionMs;
  const deleted: string[] = [];
  for (const dir of [logsDir(core.options.stateDir), shardsDir(core.options.stateDir)]) {
    let names: string[];
    try {
      names = await readdir(dir);
    } catch {
      continue;
    }
    for (const name of names) {
      const shardId = shardOf(name);
      if (shardId === undefined || core.shards.has(shardId)) continue;
      const file = join(dir, name);
      try {
        if ((await stat(file)).mtimeMs >= cutoff) continue;
        await rm(file, { force: true });
        deleted.push(file);
      } catch (err) {
        core.log(`could not delete ${file}: ${errorText(err)}`, 'warn');
      }
    }
  }
  if (deleted.length > 0) {
    const days = Math.round((core.options.logRetentionMs / 86_400_000) * 10) / 10;
    core.log(`deleted ${deleted.length} file(s) of stopped shards older than ${days} day(s) (--log-retention)`);
  }
  return deleted;
}

/** Runs `task` every `everyMs`, never two at once; returns a stop function. */
export function every(everyMs: number, task: () => Promise<unknown>): () => void {
  let running = false;
  const timer = setInterval(() => {
    if (running) return;
    running = true;
    void task().finally(() => (running = false));
  }, everyMs);
  timer.unref();
  return () => clearInterval(timer);
}
