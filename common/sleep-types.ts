// Sleep, wake and swap (issue 38, docs/sleep.md once written): the shapes the catalog, the agent,
// the replica workflow, the router and the CLI share. Plain JSON; safe to import from workflows.

/**
 * A profile's sleep policy (catalog `sleep:`): idle `afterSeconds`, its replicas are put to
 * sleep at `level` (vLLM's: 1 moves the weights to host RAM and frees the KV cache, 2 frees
 * both); asleep `stopAfterSeconds` more, they are stopped (scale to zero). A replica just woken
 * stays awake at least `minAwakeSeconds`, so two models taking turns do not thrash.
 */
export interface SleepPolicy {
  afterSeconds: number;
  level: 1 | 2;
  stopAfterSeconds?: number;
  minAwakeSeconds: number;
}

/** The agent's activities on one shard's engine (agent/activities.ts). */
export interface SleepShardRequest {
  shardId: string;
  level: 1 | 2;
}
export interface SleepShardResult {
  shardId: string;
  level: 1 | 2;
  /** How long the engine took to fall asleep, as the agent measured it. */
  tookMs: number;
}
export interface WakeShardRequest {
  shardId: string;
}
export interface WakeShardResult {
  shardId: string;
  /** From the wake call to the engine answering again, as the agent measured it. */
  tookMs: number;
}
/** What the engine itself says (vLLM's GET /is_sleeping, llama.cpp's /props). */
export interface ShardSleepState {
  shardId: string;
  sleeping: boolean;
  level?: 1 | 2;
}
export interface SleepActivities {
  sleepShard(request: SleepShardRequest): Promise<SleepShardResult>;
  wakeShard(request: WakeShardRequest): Promise<WakeShardResult>;
  shardSleepState(request: { shardId: string }): Promise<ShardSleepState>;
}

/** The replica's `sleepReplica` and `wakeReplica` Updates: who asked is in the history. */
export interface SleepRequest {
  /** Who asks: `cli:<user>`, `autoscaler`, `router:<id>`, `node:<id>` (a wake elsewhere needs the GPU). */
  by: string;
  level?: 1 | 2;
  reason?: string;
  /** Sleep even within the profile's `minAwakeSeconds` of the last wake (an operator who means it). */
  force?: boolean;
}
export interface WakeRequest {
  by: string;
  reason?: string;
}
export interface WakeResult {
  replicaId: string;
  /** From the Update's acceptance to the engine answering; 0 when it was awake already. */
  wokeInMs: number;
  alreadyAwake: boolean;
}

/** A replica's sleep as `llmgw status` and the Web UI show it. */
export interface SleepView {
  /** Set while it sleeps. */
  since?: string;
  level?: 1 | 2;
  lastWake?: { at: string; by: string; tookMs: number };
}
