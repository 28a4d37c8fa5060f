// Upkeep of the engines' log files: each shard's log is bounded by copy-truncate. Agent side;
// runs on a timer, never in the way of a start or a stop.
import { errorText, type SupervisorCore } from './core.js';
import { enforceLogLimit } from './logs.js';

export async function enforceLogLimits(core: SupervisorCore): Promise<void> {
  const max = core.options.maxLogBytes;
  for (const shard of core.shards.values()) {
    try {
      if (enforceLogLimit(shard.logFile, max))
        core.log(`shard ${shard.spec.shardId}: log over ${max} bytes; kept the previous part as ${shard.logFile}.1`);
    } catch (err) {
      core.log(`shard ${shard.spec.shardId}: could not bound its log: ${errorText(err)}`, 'warn');
    }
  }
}
