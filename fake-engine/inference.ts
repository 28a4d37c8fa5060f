// The fake engine's inference routes: chat and text completions (planned here, served by
// completion.ts) and embeddings, validated against OpenAI's request shapes. Engine side.
import type { ServerResponse } from 'node:http';
import { serveCompletion, type CompletionContext, type CompletionKind } from './completion.js';
import type { LoraAdapters } from './lora.js';
import type { FakeEngineOptions } from './options.js';
import { BlockHasher } from './prefix-cache.js';
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
  const { metrics } = ctx;
  const primaryName = opts.servedModelNames[0];
  const modelJson = new Map(opts.servedModelNames.map((name) => [name, JSON.stringify(name)]));
  const modelSeed = hashString(HASH_START, opts.model);

  /** The served name a request may use, or an error already sent. */
  const resolveModel = (res: ServerResponse, model: string | null | undefined): string | undefined => {
    if (model === undefined || model === null) return primaryName;
    if (modelJson.has(model)) return model;
    // An adapter is served while it is loaded, and counted running until its answer ends.
    if (lora?.admit(model, res)) return model;
    sendError(res, 'NotFoundError', `The model \`${model}\` does not exist.`);
    return undefined;
  };

  const planCompletion = (
    res: ServerResponse,
    kind: CompletionKind,
    model: string,
    seed: number,
    promptTokens: number,
    body: ChatRequest | CompletionRequest,
    maxTokens: number | null | undefined,
    blocks: readonly number[],
  ) => {
    const tokens = maxTokens ?? DEFAULT_MAX_TOKENS;
    if (promptTokens + tokens > opts.maxModelLen) {
      return sendError(
        res,
        'BadRequestError',
        `This model's maximum context length is ${opts.maxModelLen} tokens. However, you requested ${promptTokens + tokens} tokens (${promptTokens} in the messages, ${tokens} in the completion). Please reduce the length of the messages or completion.`,
      );
    }
    serveCompletion(ctx, res, {
      blocks,
      kind,
      id: nextId(kind === 'chat' ? 'chatcmpl' : 'cmpl'),
      modelJson: modelJson.get(model) ?? JSON.stringify(model),
      seed: body.seed === undefined || body.seed === null ? seed : hashNumber(seed, body.seed),
      tokens,
      promptTokens,
      stream: body.stream === true,
      includeUsage: body.stream_options?.include_usage === true,
    });
  };

  const chat = (res: ServerResponse, raw: unknown) => {
    const parsed = ChatRequest.safeParse(raw);
    if (!parsed.success) return sendError(res, 'BadRequestError', describeIssues(parsed.error));
    const body = parsed.data;
    const model = resolveModel(res, body.model);
    if (model === undefined) return;
    let seed = modelSeed;
    let promptTokens = 0;
    // Only an engine that models a prefix cache pays for cutting prompts into blocks.
    const hasher = ctx.cache ? new BlockHasher(ctx.cache.blockSize) : undefined;
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
    const tokens = Math.max(1, promptTokens);
    planCompletion(res, 'chat', model, seed, tokens, body, body.max_completion_tokens ?? body.max_tokens, hasher?.blocks ?? NO_BLOCKS);
  };

  const completions = (res: ServerResponse, raw: unknown) => {
    const parsed = CompletionRequest.safeParse(raw);
    if (!parsed.success) return sendError(res, 'BadRequestError', describeIssues(parsed.error));
    const body = parsed.data;
    const model = resolveModel(res, body.model);
    if (model === undefined) return;
    const prompt = singlePrompt(body.prompt);
    if (prompt === undefined) return sendError(res, 'BadRequestError', 'prompt: the fake engine takes one prompt per request');
    const seed = hashString(modelSeed, prompt.text);
    let blocks = NO_BLOCKS;
    if (ctx.cache) {
      const hasher = new BlockHasher(ctx.cache.blockSize);
      hasher.feed(prompt.text);
      blocks = hasher.blocks;
    }
    planCompletion(res, 'text', model, seed, Math.max(1, prompt.tokens), body, body.max_tokens, blocks);
  };

  const embeddings = (res: ServerResponse, raw: unknown) => {
    const parsed = EmbeddingRequest.safeParse(raw);
    if (!parsed.success) return sendError(res, 'BadRequestError', describeIssues(parsed.error));
    const body = parsed.data;
    const model = resolveModel(res, body.model);
    if (model === undefined) return;
    const inputs = embeddingInputs(body.input);
    const dim = body.dimensions ?? opts.embeddingDim;
    const base64 = body.encoding_format === 'base64';
    let promptTokens = 0;
    const data = inputs.map((input, index) => {
      promptTokens += input.tokens;
      const vector = embeddingVector(hashString(modelSeed, input.text), dim);
      const embedding = base64 ? Buffer.from(vector.buffer, vector.byteOffset, vector.byteLength).toString('base64') : Array.from(vector);
      return { object: 'embedding', index, embedding };
    });
    const out = JSON.stringify({
      id: nextId('embd'),
      object: 'list',
      created: Math.floor(Date.now() / 1000),
      model,
      data,
      usage: { prompt_tokens: promptTokens, total_tokens: promptTokens },
    });
    metrics.requestSuccess++;
    metrics.promptTokens += promptTokens;
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(out) });
    res.end(out);
  };

  return { chat, completions, embeddings };
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
