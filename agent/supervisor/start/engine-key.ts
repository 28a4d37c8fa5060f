// How the agent hands an engine its API key at spawn (its replica run's, derived from
// --engine-key-file's: common/engine-keys.ts), never on its command line (/proc/PID/cmdline is
// world-readable and strangers' command lines are reported to Temporal): in the environment for
// vLLM, llama-server and the fake engine; in a 0400 config file only the engine's user can read
// for SGLang, which takes the key from no variable. Agent side.
import { chmodSync, chownSync, closeSync, fsyncSync, mkdirSync, openSync, renameSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { engineKeyFor, keyChainOf } from '../../../common/engine-keys.js';
import { readPlacementTicket } from '../../../common/placement-ticket.js';
import { Engine, type StartShard } from '../../../proto/gen/llmgw/v1/shard_pb.js';
import type { EngineUser } from '../../engine-identity.js';

/**
 * The key `spec`'s engine requires: derived from the fleet's for the run chain its ticket names
 * (checked before anything is spawned), so that it opens this replica run's engines only, and
 * the same at every restart of that run's engine. A start with no ticket (placed before tickets,
 * or by a control plane without a catalog key) gets the fleet key, as its routes name no chain.
 */
export function shardEngineKey(spec: StartShard, fleetKey: string): string {
  const ticket = readPlacementTicket(spec.placementTicket);
  return engineKeyFor(fleetKey, ticket ? keyChainOf(ticket) : undefined);
}

/** What an engine of this kind is given: variables, or a YAML file of options (SGLang's --config). */
export type EngineKeyDelivery = { kind: 'env'; env: Record<string, string> } | { kind: 'config'; yaml: string };

export function engineKeyDelivery(engine: Engine | undefined, key: string): EngineKeyDelivery {
  switch (engine) {
    case Engine.SGLANG:
      // SGLang reads no variable for --api-key, but `--config FILE` takes any option as YAML
      // (command-line options win over it). A JSON string is a valid YAML double-quoted scalar.
      return { kind: 'config', yaml: `api-key: ${JSON.stringify(key)}\n` };
    case Engine.LLAMACPP:
      // llama-server reads LLAMA_API_KEY as its --api-key.
      return { kind: 'env', env: { LLAMA_API_KEY: key } };
    default:
      // vLLM reads VLLM_API_KEY; the fake engine does as vLLM does.
      return { kind: 'env', env: { VLLM_API_KEY: key } };
  }
}

/** <stateDir>/engine-config: passable (0711) but not listable, so an engine reaches only its own file. */
export function engineConfigDir(stateDir: string): string {
  return join(stateDir, 'engine-config');
}

export function engineConfigPath(stateDir: string, shardId: string): string {
  return join(engineConfigDir(stateDir), `${shardId}.yaml`);
}

/**
 * Writes a shard's config file (write, fsync, rename), 0400 and owned by the engine's user when
 * it runs as another one, and returns its path. Rewritten at every spawn, so a rotated key
 * reaches the next start; removed with the shard's record.
 */
export function writeEngineConfig(stateDir: string, shardId: string, yaml: string, user: EngineUser | undefined): string {
  const dir = engineConfigDir(stateDir);
  mkdirSync(dir, { recursive: true, mode: 0o711 });
  chmodSync(dir, 0o711);
  const file = engineConfigPath(stateDir, shardId);
  const tmp = `${file}.tmp-${process.pid}`;
  const fd = openSync(tmp, 'w', 0o400);
  try {
    if (user) chownSync(tmp, user.uid, user.gid);
    writeSync(fd, yaml);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, file);
  return file;
}

export function removeEngineConfig(stateDir: string, shardId: string): void {
  rmSync(engineConfigPath(stateDir, shardId), { force: true });
}
