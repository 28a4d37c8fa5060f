// The fake engine's options once parsed (options.ts turns the argv into these) and their
// defaults: what the engine, its tests and the router's test harnesses share.
import type { KvEventsSettings } from './kv-events.js';
import type { LoraSettings } from './lora.js';

export interface LeaderAddress {
  host: string;
  port: number;
}

export interface FakeEngineOptions {
  host: string;
  /** HTTP port; 0 asks the OS for one (in-process use). Undefined only for workers without HTTP. */
  port: number | undefined;
  model: string;
  /** Names clients may use; the first is the one reported in metrics and /v1/models order. */
  servedModelNames: [string, ...string[]];
  loadTimeS: number;
  /** A weights directory to check and load (its size adds to the load time); fake-engine/weights.ts. */
  weights?: string;
  /** Bytes per second the weights load at. */
  weightsLoadRate?: number;
  /** 0 means as fast as possible, with no timers at all. */
  tokensPerSecond: number;
  maxConcurrency: number;
  /** Prompt tokens prefilled per second, one request after another; 0 prefills instantly. */
  prefillTokensPerSecond: number;
  /** Prefix cache capacity in blocks; 0 turns the cache (and its metrics) off. */
  prefixCacheBlocks: number;
  /** Tokens (words) per cache block, as vLLM's --block-size. */
  blockSize: number;
  embeddingDim: number;
  maxModelLen: number;
  /** vLLM's --kv-events-config: publish the prefix cache's KV-cache events; undefined: off. */
  kvEvents: KvEventsSettings | undefined;
  /** --enable-lora (with --max-loras, --max-lora-rank, --lora-load-time); undefined: adapters are refused. */
  lora: LoraSettings | undefined;
  crashAfterS: number | undefined;
  unhealthyAfterS: number | undefined;
  hang: boolean;
  failStart: boolean;
  /**
   * Host variables printed (NAME=value) before anything else: tests show that what an engine
   * prints, a token included, stays in its log on the host.
   */
  printEnv: string[];
  nnodes: number;
  nodeRank: number;
  /** Rank 0 listens here for workers; workers connect here. Required when nnodes > 1. */
  leader: LeaderAddress | undefined;
  /** As vLLM's --api-key (or VLLM_API_KEY): /v1/* answers 401 without `Authorization: Bearer <key>`. */
  apiKey?: string;
  /** As vLLM's --ssl-certfile and --ssl-keyfile (PEM files): serve HTTPS with them. */
  tls?: { certFile: string; keyFile: string };
  /** vLLM's --enable-sleep-mode: the engine can be put to sleep (fake-engine/sleep.ts). */
  sleepMode?: boolean;
  /** VLLM_SERVER_DEV_MODE=1 in its environment: the dev routes (/sleep, /wake_up, /is_sleeping) are served. */
  devMode?: boolean;
  /** Seconds a wake takes (level 2: plus the load time). */
  wakeSeconds: number;
  /** vLLM's --gpu-memory-utilization: the share of each GPU the engine takes (weights and KV cache). */
  gpuMemoryUtilization: number;
  /** MiB of that share that are weights (the rest is KV cache); default half of it. */
  weightsMib?: number;
  /** A simulated host's GPU ledger (common/sim-gpu-ledger.ts): where this engine's memory is accounted. */
  simulatedGpus?: { ledgerDir: string; gpus: number[]; key: string; pid: number };
}

export const DEFAULTS = {
  host: '127.0.0.1',
  model: 'fake-model',
  loadTimeS: 0,
  tokensPerSecond: 0,
  maxConcurrency: 256,
  prefillTokensPerSecond: 0,
  prefixCacheBlocks: 0,
  blockSize: 16,
  embeddingDim: 16,
  maxModelLen: 32768,
  nnodes: 1,
  nodeRank: 0,
  wakeSeconds: 0.5,
  gpuMemoryUtilization: 0.9,
} as const;

/** Options for in-process use: everything defaulted except what the caller sets. */
export function fakeEngineOptions(overrides: Partial<FakeEngineOptions> = {}): FakeEngineOptions {
  const model = overrides.model ?? DEFAULTS.model;
  return {
    host: DEFAULTS.host,
    port: 0,
    model,
    servedModelNames: [model],
    loadTimeS: DEFAULTS.loadTimeS,
    tokensPerSecond: DEFAULTS.tokensPerSecond,
    maxConcurrency: DEFAULTS.maxConcurrency,
    prefillTokensPerSecond: DEFAULTS.prefillTokensPerSecond,
    prefixCacheBlocks: DEFAULTS.prefixCacheBlocks,
    blockSize: DEFAULTS.blockSize,
    embeddingDim: DEFAULTS.embeddingDim,
    maxModelLen: DEFAULTS.maxModelLen,
    kvEvents: undefined,
    lora: undefined,
    crashAfterS: undefined,
    unhealthyAfterS: undefined,
    hang: false,
    failStart: false,
    printEnv: [],
    nnodes: DEFAULTS.nnodes,
    nodeRank: DEFAULTS.nodeRank,
    leader: undefined,
    wakeSeconds: DEFAULTS.wakeSeconds,
    gpuMemoryUtilization: DEFAULTS.gpuMemoryUtilization,
    ...overrides,
  };
}
