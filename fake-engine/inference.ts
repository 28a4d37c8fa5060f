// The fake engine's inference routes: chat and text completions (planned here, served by
// completion.ts) and embeddings, validated against OpenAI's request shapes. Engine side.
import type { ServerResponse } from 'node:http';
import type { z } from 'zod';
import { serveCompletion, type CompletionContext, type CompletionKind } from './completion.js';
import type { LoraAdapters } from './lora.js';
import type { FakeEngineOptions } from './options.js';
import { BlockHasher } from '../router/kv/hashing.js';
import { ChatRequest, CompletionRequest, EmbeddingRequest, describeIssues, sendError } from './requests.js';
import { HASH_START, countWords, embeddingVector, hashNumber, hashString } from './text.js';

const DEFAULT_MAX_TOKENS = 16;
const NO_BLOCKS: readonly number[] = [];

export interface InferenceRoutes {
  chat(res: ServerResponse, body: unknown): void;
  completions(res: ServerResponse, body: unknown): void;
  embeddings(res: ServerResponse, body: unknown): void;
}

export function inferenceRoutes(
  opts: FakeEngineOptions,
  ctx: CompletionContext,
  nextId: (prefix: string) => string,
  lora?: LoraAdapters,
): InferenceRoutes {
  return new InferenceHandlers(opts, ctx, nextId, lora);
}

/** What every route reads first: the request, checked, and the served model it names. */
interface Admitted<T> {
  body: T;
  model: string;
}

/** What a completion's prompt came to: its seed for the answer, its length, its cache blocks. */
interface Prompt {
  seed: number;
  promptTokens: number;
  blocks: readonly number[];
}

// The routes are fields, not methods, so that the HTTP layer can hand them on unbound.
class InferenceHandlers implements InferenceRoutes {
  private readonly primaryName: string;
  private readonly modelJson: Map<string, string>;
  private readonly modelSeed: number;

  constructor(
    private readonly opts: FakeEngineOptions,
    private readonly ctx: CompletionContext,
    private readonly nextId: (prefix: string) => string,
    private readonly lora: LoraAdapters | undefined,
  ) {
    this.primaryName = opts.servedModelNames[0];
    this.modelJson = new Map(opts.servedModelNames.map((name) => [name, JSON.stringify(name)]));
    this.modelSeed = hashString(HASH_START, opts.model);
  }

  readonly chat = (res: ServerResponse, raw: unknown): void => {
    const admitted = this.admit(res, ChatRequest, raw);
    if (admitted === undefined) return;
    const { body } = admitted;
    let seed = this.modelSeed;
    let promptTokens = 0;
    // Only an engine that models a prefix cache pays for cutting prompts into blocks.
    const hasher = this.ctx.cache ? new BlockHasher(this.ctx.cache.blockSize) : undefined;
    for (const message of body.messages) {
      seed = hashString(seed, message.role);
      hasher?.feed(message.role);
      const content = message.content;
      if (typeof content === 'string') {
        seed = hashString(seed, content);
        hasher?.feed(content);
        promptTokens += countWords(content);
      } else if (content) {
        for (const part of content) {
          if (part.text === undefined) continue;
          seed = hashString(seed, part.text);
          hasher?.feed(part.text);
          promptTokens += countWords(part.text);
        }
      }
    }
    const prompt = { seed, promptTokens: Math.max(1, promptTokens), blocks: hasher?.blocks ?? NO_BLOCKS };
    this.complete(res, 'chat', admitted, prompt, body.max_completion_tokens ?? body.max_tokens);
  };

  readonly completions = (res: ServerResponse, raw: unknown): void => {
    const admitted = this.admit(res, CompletionRequest, raw);
    if (admitted === undefined) return;
    const prompt = singlePrompt(admitted.body.prompt);
    if (prompt === undefined) return sendError(res, 'BadRequestError', 'prompt: the fake engine takes one prompt per request');
    let blocks = NO_BLOCKS;
    if (this.ctx.cache) {
      const hasher = new BlockHasher(this.ctx.cache.blockSize);
      hasher.feed(prompt.text);
      blocks = hasher.blocks;
    }
    const seed = hashString(this.modelSeed, prompt.text);
    this.complete(res, 'text', admitted, { seed, promptTokens: Math.max(1, prompt.tokens), blocks }, admitted.body.max_tokens);
  };

  readonly embeddings = (res: ServerResponse, raw: unknown): void => {
    const admitted = this.admit(res, EmbeddingRequest, raw);
    if (admitted === undefined) return;
    const { body, model } = admitted;
    const dim = body.dimensions ?? this.opts.embeddingDim;
    const base64 = body.encoding_format === 'base64';
    let promptTokens = 0;
    const data = embeddingInputs(body.input).map((input, index) => {
      promptTokens += input.tokens;
      const vector = embeddingVector(hashString(this.modelSeed, input.text), dim);
      const embedding = base64 ? Buffer.from(vector.buffer, vector.byteOffset, vector.byteLength).toString('base64') : Array.from(vector);
      return { object: 'embedding', index, embedding };
    });
    const out = JSON.stringify({
      id: this.nextId('embd'),
      object: 'list',
      created: Math.floor(Date.now() / 1000),
      model,
      data,
      usage: { prompt_tokens: promptTokens, total_tokens: promptTokens },
    });
    this.ctx.metrics.requestSuccess++;
    this.ctx.metrics.promptTokens += promptTokens;
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(out) });
    res.end(out);
  };

  /** The request checked against its schema and its model resolved, or undefined with the error already sent. */
  private admit<T extends { model?: string | null }>(res: ServerResponse, schema: z.ZodType<T>, raw: unknown): Admitted<T> | undefined {
    const parsed = schema.safeParse(raw);
    if (!parsed.success) {
      sendError(res, 'BadRequestError', describeIssues(parsed.error));
      return undefined;
    }
    const model = this.resolveModel(res, parsed.data.model);
    return model === undefined ? undefined : { body: parsed.data, model };
  }

  /** The served name a request may use, or an error already sent. */
  private resolveModel(res: ServerResponse, model: string | null | undefined): string | undefined {
    if (model === undefined || model === null) return this.primaryName;
    if (this.modelJson.has(model)) return model;
    // An adapter is served while it is loaded, and counted running until its answer ends.
    if (this.lora?.admit(model, res)) return model;
    sendError(res, 'NotFoundError', `The model \`${model}\` does not exist.`);
    return undefined;
  }

  private complete(
    res: ServerResponse,
    kind: CompletionKind,
    { body, model }: Admitted<ChatRequest | CompletionRequest>,
    { seed, promptTokens, blocks }: Prompt,
    maxTokens: number | null | undefined,
  ): void {
    const tokens = maxTokens ?? DEFAULT_MAX_TOKENS;
    const maxModelLen = this.opts.maxModelLen;
    if (promptTokens + tokens > maxModelLen) {
      return sendError(
        res,
        'BadRequestError',
        `This model's maximum context length is ${maxModelLen} tokens. However, you requested ${promptTokens + tokens} tokens (${promptTokens} in the messages, ${tokens} in the completion). Please reduce the length of the messages or completion.`,
      );
    }
    serveCompletion(this.ctx, res, {
      blocks,
      kind,
      id: this.nextId(kind === 'chat' ? 'chatcmpl' : 'cmpl'),
      modelJson: this.modelJson.get(model) ?? JSON.stringify(model),
      seed: body.seed === undefined || body.seed === null ? seed : hashNumber(seed, body.seed),
      tokens,
      promptTokens,
      stream: body.stream === true,
      includeUsage: body.stream_options?.include_usage === true,
    });
  }
}

interface PromptInput {
  text: string;
  tokens: number;
}

/** One prompt from any of the shapes OpenAI allows, or undefined for a batch. */
function singlePrompt(prompt: CompletionRequest['prompt']): PromptInput | undefined {
  if (typeof prompt === 'string') return { text: prompt, tokens: countWords(prompt) };
  if (prompt.length === 0) return { text: '', tokens: 0 };
  const first = prompt[0];
  if (typeof first === 'number') return { text: prompt.join(','), tokens: prompt.length };
  if (prompt.length > 1) return undefined;
  if (typeof first === 'string') return { text: first, tokens: countWords(first) };
  return first === undefined ? undefined : { text: first.join(','), tokens: first.length };
}

function embeddingInputs(input: EmbeddingRequest['input']): PromptInput[] {
  if (typeof input === 'string') return [{ text: input, tokens: countWords(input) }];
  if (input.length === 0) return [];
  if (typeof input[0] === 'number') return [{ text: input.join(','), tokens: input.length }];
  return (input as Array<string | number[]>).map((item) =>
    typeof item === 'string' ? { text: item, tokens: countWords(item) } : { text: item.join(','), tokens: item.length },
  );
}
