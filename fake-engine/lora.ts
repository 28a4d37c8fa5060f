// The fake engine's LoRA adapters, as vLLM serves them with --enable-lora and
// VLLM_ALLOW_RUNTIME_LORA_UPDATING: POST /v1/load_lora_adapter and /v1/unload_lora_adapter,
// adapters listed in /v1/models with their `parent`, requests naming an adapter served only
// while it is loaded, and vLLM's `vllm:lora_requests_info` gauge. Engine side.
//
// Like a LoRA resolver started with a fixed list, it loads only the sources LLMGW_LORA_SOURCES
// names (the signed revision's list, catalog/adapters.ts), whoever asks: the engine key lets a
// caller in, it does not make any directory on the host an adapter.
//
// One deliberate difference: vLLM registers any number of adapters and swaps them through its
// CPU cache (--max-cpu-loras) at a cost per batch; the fake engine makes --max-loras a hard
// limit on what is loaded and refuses a load beyond it, so a router that overcommits an
// engine's slots is caught by every test instead of passing slowly.
import { existsSync, readFileSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { z } from 'zod';
import { describeIssues, sendError } from './requests.js';

export interface LoraSettings {
  /** vLLM's --max-loras (default 1). */
  maxLoras: number;
  /** vLLM's --max-lora-rank (default 16): an adapter of a higher rank is refused. */
  maxLoraRank: number;
  /** The fake engine's own --lora-load-time: how long a load takes, seconds. */
  loadTimeS: number;
  /** LLMGW_LORA_SOURCES: the only adapter directories a load may name; undefined: any (vLLM's own behaviour). */
  allowedSources?: readonly string[];
}

export const DEFAULT_LORA: LoraSettings = { maxLoras: 1, maxLoraRank: 16, loadTimeS: 0 };

/**
 * LLMGW_LORA_SOURCES: a JSON array of adapter directories; undefined for anything else, which
 * the engine takes as a reason not to start rather than to load anything.
 */
export function loraSources(text: string): string[] | undefined {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    return undefined;
  }
  const parsed = z.array(z.string().min(1)).safeParse(raw);
  return parsed.success ? parsed.data : undefined;
}

const LoadRequest = z.looseObject({ lora_name: z.string().min(1), lora_path: z.string().min(1) });
const UnloadRequest = z.looseObject({ lora_name: z.string().min(1) });

interface Adapter {
  name: string;
  path: string;
  /** Requests for it now in the engine. */
  running: number;
}

export class LoraAdapters {
  private readonly loaded = new Map<string, Adapter>();
  /** Loads under way: they hold a slot, so that two at once cannot pass the limit. */
  private readonly loading = new Set<string>();

  constructor(
    readonly settings: LoraSettings,
    private readonly baseName: string,
  ) {}

  /** The adapter a request names, when it is loaded; counts it running until the response closes. */
  admit(name: string, res: ServerResponse): boolean {
    const adapter = this.loaded.get(name);
    if (adapter === undefined) return false;
    adapter.running++;
    res.once('close', () => adapter.running--);
    return true;
  }

  /** /v1/models entries of the loaded adapters, as vLLM lists them. */
  modelCards(created: number): object[] {
    return [...this.loaded.values()].map((a) => ({
      id: a.name,
      object: 'model',
      created,
      owned_by: 'vllm',
      root: a.path,
      parent: this.baseName,
    }));
  }

  /** vLLM's gauge: the label values carry the adapters, the value is when it was written. */
  metricsText(): string {
    const running = [...this.loaded.values()].filter((a) => a.running > 0).map((a) => a.name);
    return (
      '# HELP vllm:lora_requests_info Running stats on lora requests.\n' +
      '# TYPE vllm:lora_requests_info gauge\n' +
      `vllm:lora_requests_info{max_lora="${this.settings.maxLoras}",running_lora_adapters="${running.join(',')}",waiting_lora_adapters=""} ${Date.now() / 1000}\n`
    );
  }

  load(res: ServerResponse, raw: unknown): void {
    const parsed = LoadRequest.safeParse(raw);
    if (!parsed.success) return sendError(res, 'BadRequestError', describeIssues(parsed.error));
    const { lora_name: name, lora_path: path } = parsed.data;
    if (this.loaded.has(name) || this.loading.has(name)) {
      return sendError(res, 'BadRequestError', `The lora adapter '${name}' has already been loaded.`);
    }
    if (this.loaded.size + this.loading.size >= this.settings.maxLoras) {
      const held = [...this.loaded.keys(), ...this.loading].join(', ');
      return sendError(
        res,
        'BadRequestError',
        `Loading lora ${name} failed: all ${this.settings.maxLoras} LoRA slots are taken (${held}); unload one first.`,
      );
    }
    const refusal = unlisted(path, this.settings.allowedSources) ?? checkAdapterPath(path, this.settings.maxLoraRank);
    if (refusal !== undefined) return sendError(res, 'BadRequestError', `Loading lora ${name} failed: ${refusal}`);
    this.loading.add(name);
    const done = () => {
      this.loading.delete(name);
      this.loaded.set(name, { name, path, running: 0 });
      const text = `Success: LoRA adapter '${name}' added successfully.`;
      res.writeHead(200, { 'content-type': 'text/plain; charset=utf-8', 'content-length': Buffer.byteLength(text) });
      res.end(text);
    };
    if (this.settings.loadTimeS > 0) setTimeout(done, this.settings.loadTimeS * 1000).unref();
    else done();
  }

  unload(res: ServerResponse, raw: unknown): void {
    const parsed = UnloadRequest.safeParse(raw);
    if (!parsed.success) return sendError(res, 'BadRequestError', describeIssues(parsed.error));
    const name = parsed.data.lora_name;
    if (!this.loaded.delete(name)) return sendError(res, 'NotFoundError', `The lora adapter '${name}' cannot be found.`);
    const text = `Success: LoRA adapter '${name}' removed successfully.`;
    res.writeHead(200, { 'content-type': 'text/plain; charset=utf-8', 'content-length': Buffer.byteLength(text) });
    res.end(text);
  }

  /** Answers the two admin routes; false when `path` is neither. */
  route(path: string, req: IncomingMessage, res: ServerResponse, withBody: (then: (body: unknown) => void) => void): boolean {
    if (path !== '/v1/load_lora_adapter' && path !== '/v1/unload_lora_adapter') return false;
    if (req.method !== 'POST') {
      sendError(res, 'MethodNotAllowedError', 'Method Not Allowed');
      return true;
    }
    withBody((body) => (path === '/v1/load_lora_adapter' ? this.load(res, body) : this.unload(res, body)));
    return true;
  }
}

/**
 * A path the engine's list does not hold, compared resolved so that `listed/../other` is not
 * the listed directory. The refusal names the path the caller sent, never the list.
 */
function unlisted(path: string, allowed: readonly string[] | undefined): string | undefined {
  if (allowed === undefined) return undefined;
  const wanted = resolve(path);
  if (allowed.some((source) => resolve(source) === wanted)) return undefined;
  return `${path} is not an adapter source this deployment's catalog lists`;
}

/**
 * What vLLM would refuse about an adapter directory: one that is not there, and a rank (PEFT's
 * adapter_config.json `r`) over --max-lora-rank. A directory without a config is taken as is.
 */
function checkAdapterPath(path: string, maxRank: number): string | undefined {
  if (!existsSync(path) || !statSync(path).isDirectory()) return `No adapter found for ${path}`;
  const config = join(path, 'adapter_config.json');
  if (!existsSync(config)) return undefined;
  let rank: unknown;
  try {
    rank = (JSON.parse(readFileSync(config, 'utf8')) as { r?: unknown }).r;
  } catch (err) {
    return `${config} is not valid JSON: ${(err as Error).message}`;
  }
  if (typeof rank === 'number' && rank > maxRank) {
    return `LoRA rank ${rank} is greater than max_lora_rank ${maxRank}.`;
  }
  return undefined;
}
