// One chat or text completion on the fake engine, from admission to the last byte: waits for
// a slot, waits out its prefill (when the engine models one), emits tokens at the configured
// rate (or as fast as the socket takes them), streams OpenAI chunks or answers in one object,
// and stops the moment the client goes away.
import type { ServerResponse } from 'node:http';
import type { EngineMetrics, Slots } from './metrics.js';
import type { PrefixCache } from './prefix-cache.js';
import { TOKEN_JSON, TOKEN_TEXT, TokenStream } from './text.js';

export type CompletionKind = 'chat' | 'text';

export interface CompletionRequestPlan {
  kind: CompletionKind;
  id: string;
  /** The served name the client asked for, already JSON-encoded. */
  modelJson: string;
  seed: number;
  tokens: number;
  promptTokens: number;
  stream: boolean;
  includeUsage: boolean;
  /** Blocks of the prompt, for the prefix cache; empty without one. */
  blocks: readonly number[];
}

export interface CompletionContext {
  slots: Slots;
  metrics: EngineMetrics;
  /** Milliseconds per token; 0 means no timers at all. */
  intervalMs: number;
  /** The engine's prefix cache and prefill queue, when it models one. */
  cache: PrefixCache | undefined;
}

const SSE_HEADERS = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache',
} as const;

const DONE = 'data: [DONE]\n\n';

export function serveCompletion(ctx: CompletionContext, res: ServerResponse, plan: CompletionRequestPlan): void {
  new Completion(ctx, res, plan).begin();
}

class Completion {
  private readonly created = Math.floor(Date.now() / 1000);
  private readonly tokens: TokenStream;
  private emitted = 0;
  private startedAt = 0;
  /** When it got its slot, and how long its prefill took: vLLM's prefill and inference times. */
  private runAt = 0;
  private prefillMs = 0;
  private holdsSlot = false;
  private done = false;
  private timer: NodeJS.Timeout | undefined;
  private cancelWait: (() => void) | undefined;
  /** The constant opening of every streamed chunk, up to the choice's own fields. */
  private chunkHead = '';

  constructor(
    private readonly ctx: CompletionContext,
    private readonly res: ServerResponse,
    private readonly plan: CompletionRequestPlan,
  ) {
    this.tokens = new TokenStream(plan.seed);
  }

  begin(): void {
    this.res.on('close', this.onClose);
    if (this.ctx.slots.tryAcquire()) this.run();
    else this.cancelWait = this.ctx.slots.wait(this.run);
  }

  private readonly onClose = (): void => {
    if (this.done) return;
    // The client left before the end: stop generating and give the slot back.
    this.done = true;
    if (this.timer) clearTimeout(this.timer);
    this.cancelWait?.();
    if (this.holdsSlot) this.ctx.slots.release();
  };

  private readonly run = (): void => {
    this.cancelWait = undefined;
    this.holdsSlot = true;
    if (this.done) {
      // Handed a slot after the client had already gone (cannot normally happen, but a
      // slot must never leak).
      this.ctx.slots.release();
      return;
    }
    const now = performance.now();
    const { plan, ctx } = this;
    const prefill = ctx.cache?.admit(plan.blocks, plan.promptTokens, now);
    const prefillMs = prefill?.prefillMs ?? 0;
    this.runAt = now;
    // vLLM's prefill time is the prefill's own work when prefills do not crowd each other; the
    // wait behind earlier prefills is this model's stand-in for that crowding, not the prefill.
    this.prefillMs = prefill?.computeMs ?? 0;
    this.startedAt = now + prefillMs;
    if (!plan.stream) {
      const ms = prefillMs + plan.tokens * ctx.intervalMs;
      if (ms > 0) this.timer = setTimeout(this.answer, ms);
      else this.answer();
      return;
    }
    const object = plan.kind === 'chat' ? 'chat.completion.chunk' : 'text_completion';
    this.chunkHead = `data: {"id":"${plan.id}","object":"${object}","created":${this.created},"model":${plan.modelJson},"choices":[{"index":0,`;
    this.res.writeHead(200, SSE_HEADERS);
    if (prefillMs > 0) {
      // The stream starts at once; its first event comes when the prompt is prefilled.
      this.res.flushHeaders();
      this.timer = setTimeout(this.firstEvent, prefillMs);
    } else this.firstEvent();
  };

  /** Headers (and, for chat, the role) go out first, as vLLM's do: a router sees the first byte before the first token. */
  private readonly firstEvent = (): void => {
    this.timer = undefined;
    if (this.done) return;
    if (this.plan.kind === 'chat')
      this.res.write(`${this.chunkHead}"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n`);
    else this.res.flushHeaders();
    this.step();
  };

  /** Writes every token that is due, then waits for the clock or for the socket to drain. */
  private readonly step = (): void => {
    this.timer = undefined;
    if (this.done) return;
    const { plan, ctx, res } = this;
    const due = ctx.intervalMs > 0 ? Math.min(plan.tokens, Math.floor((performance.now() - this.startedAt) / ctx.intervalMs)) : plan.tokens;
    const tail = plan.kind === 'chat' ? '},"logprobs":null,"finish_reason":null}]}\n\n' : ',"logprobs":null,"finish_reason":null}]}\n\n';
    const open = plan.kind === 'chat' ? `${this.chunkHead}"delta":{"content":` : `${this.chunkHead}"text":`;
    // Corked, the tokens due now leave in one write to the socket, still one chunk each.
    res.cork();
    let writable = true;
    while (this.emitted < due && writable) {
      writable = res.write(open + TOKEN_JSON[this.tokens.next()] + tail);
      this.emitted++;
    }
    res.uncork();
    if (this.emitted === plan.tokens) return this.finishStream();
    if (!writable) {
      res.once('drain', this.step);
      return;
    }
    const nextAt = this.startedAt + (this.emitted + 1) * ctx.intervalMs;
    this.timer = setTimeout(this.step, Math.max(0, nextAt - performance.now()));
  };

  private finishStream(): void {
    const { plan } = this;
    let out =
      plan.kind === 'chat'
        ? `${this.chunkHead}"delta":{},"logprobs":null,"finish_reason":"length","stop_reason":null}]}\n\n`
        : `${this.chunkHead}"text":"","logprobs":null,"finish_reason":"length","stop_reason":null}]}\n\n`;
    if (plan.includeUsage) {
      const object = plan.kind === 'chat' ? 'chat.completion.chunk' : 'text_completion';
      out += `data: {"id":"${plan.id}","object":"${object}","created":${this.created},"model":${plan.modelJson},"choices":[],"usage":${this.usageJson()}}\n\n`;
    }
    this.complete();
    this.res.end(out + DONE);
  }

  private readonly answer = (): void => {
    this.timer = undefined;
    if (this.done) return;
    const { plan } = this;
    let text = '';
    for (let i = 0; i < plan.tokens; i++) text += TOKEN_TEXT[this.tokens.next()];
    const textJson = JSON.stringify(text);
    const choice =
      plan.kind === 'chat'
        ? `{"index":0,"message":{"role":"assistant","content":${textJson}},"logprobs":null,"finish_reason":"length","stop_reason":null}`
        : `{"index":0,"text":${textJson},"logprobs":null,"finish_reason":"length","stop_reason":null}`;
    const object = plan.kind === 'chat' ? 'chat.completion' : 'text_completion';
    const body = `{"id":"${plan.id}","object":"${object}","created":${this.created},"model":${plan.modelJson},"choices":[${choice}],"usage":${this.usageJson()}}`;
    this.complete();
    this.res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
    this.res.end(body);
  };

  private usageJson(): string {
    const { promptTokens, tokens } = this.plan;
    return `{"prompt_tokens":${promptTokens},"total_tokens":${promptTokens + tokens},"completion_tokens":${tokens}}`;
  }

  private complete(): void {
    this.done = true;
    const { metrics, slots } = this.ctx;
    // vLLM's phase histograms: a router reads from them what a prefill and a request cost here.
    metrics.prefillSeconds += this.prefillMs / 1000;
    const inferenceSeconds = (performance.now() - this.runAt) / 1000;
    metrics.inferenceSeconds += inferenceSeconds;
    metrics.decodeSeconds += Math.max(0, inferenceSeconds - this.prefillMs / 1000);
    metrics.completions++;
    metrics.requestSuccess++;
    metrics.promptTokens += this.plan.promptTokens;
    metrics.generationTokens += this.plan.tokens;
    if (this.holdsSlot) slots.release();
    this.holdsSlot = false;
  }
}
