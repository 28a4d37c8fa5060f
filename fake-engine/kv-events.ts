// The fake engine's KV-cache events, published as vLLM publishes them (--kv-events-config), so
// that a router's precise cache scoring runs its real path in tests and benchmarks. Engine side.
//
// Wire format (vLLM's vllm/distributed/kv_events.py): a ZeroMQ PUB socket; each message has three
// frames: the topic, the batch's sequence number (8 bytes, big-endian), and a msgpack array
// `[ts, events]` where each event is an array tagged by its class name:
//   ["BlockStored", block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium]
//   ["BlockRemoved", block_hashes, medium]
//   ["AllBlocksCleared"]
// The fake engine has words, not token ids, so `token_ids` is empty; block hashes are its own.
// Events of one turn of the event loop go out as one batch, as vLLM sends one per engine step.
import { encode } from '@msgpack/msgpack';
import { Publisher } from 'zeromq';
import { z } from 'zod';
import type { CacheListener } from './prefix-cache.js';

/** vLLM's KVEventsConfig, as JSON on --kv-events-config; fields we do not use are accepted. */
export const KvEventsConfig = z.looseObject({
  enable_kv_cache_events: z.boolean().default(false),
  publisher: z.enum(['null', 'zmq']).optional(),
  endpoint: z.string().min(1).default('tcp://*:5557'),
  topic: z.string().default(''),
});
export type KvEventsConfig = z.infer<typeof KvEventsConfig>;

/** Where and under which topic the engine publishes, once --kv-events-config turned it on. */
export interface KvEventsSettings {
  /** A ZeroMQ bind address: `tcp://*:5557`, or `tcp://127.0.0.1:*` for a port of the OS's choosing. */
  endpoint: string;
  topic: string;
}

/** The settings a --kv-events-config value asks for, or undefined when events stay off. Throws naming the field. */
export function parseKvEventsConfig(json: string): KvEventsSettings | undefined {
  let raw: unknown;
  try {
    raw = JSON.parse(json);
  } catch {
    throw new Error('--kv-events-config must be JSON');
  }
  const parsed = KvEventsConfig.safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new Error(`--kv-events-config: ${issue?.path.join('.') ?? ''} ${issue?.message ?? 'invalid'}`);
  }
  const c = parsed.data;
  // vLLM publishes only with a publisher named; "null" (or none) keeps the events in the engine.
  if (!c.enable_kv_cache_events || c.publisher !== 'zmq') return undefined;
  return { endpoint: c.endpoint, topic: c.topic };
}

type KvEvent =
  ['BlockStored', number[], number | null, number[], number, null, null] | ['BlockRemoved', number[], null] | ['AllBlocksCleared'];

export class KvEventPublisher implements CacheListener {
  private socket: Publisher | undefined;
  private pending: KvEvent[] = [];
  private scheduled = false;
  private sending = false;
  /** The next batch's number; batches dropped while the socket is down still take one (a reader sees the gap). */
  private seq = 0n;
  private readonly topic: Buffer;
  /** Where subscribers connect: the bound address with the port the OS gave. */
  address = '';

  constructor(
    private readonly settings: KvEventsSettings,
    private readonly blockSize: number,
  ) {
    this.topic = Buffer.from(settings.topic);
  }

  /** Binds the socket (again, after stop(): the same address, the sequence going on). */
  async start(): Promise<void> {
    const socket = new Publisher({ linger: 0 });
    const bindTo = this.address === '' ? this.settings.endpoint : this.address;
    await socket.bind(bindTo);
    this.socket = socket;
    this.address = (socket.lastEndpoint ?? bindTo).replace('0.0.0.0', '127.0.0.1');
  }

  /** Closes the socket: subscribers lose the stream (a test's lost socket, an engine going away). */
  stop(): void {
    this.socket?.close();
    this.socket = undefined;
  }

  stored(hashes: number[], parent: number | null): void {
    this.push(['BlockStored', hashes, parent, [], this.blockSize, null, null]);
  }

  removed(hashes: number[]): void {
    this.push(['BlockRemoved', hashes, null]);
  }

  cleared(): void {
    this.push(['AllBlocksCleared']);
  }

  private push(event: KvEvent): void {
    this.pending.push(event);
    if (this.scheduled) return;
    this.scheduled = true;
    setImmediate(this.flush);
  }

  private readonly flush = (): void => {
    this.scheduled = false;
    if (this.sending || this.pending.length === 0) return;
    const events = this.pending;
    this.pending = [];
    const seq = Buffer.alloc(8);
    seq.writeBigInt64BE(this.seq++);
    const socket = this.socket;
    if (socket === undefined) return;
    const payload = encode([Date.now() / 1000, events]);
    this.sending = true;
    // PUB never blocks (a slow subscriber loses messages at its high-water mark), but a socket
    // takes one send at a time: what came meanwhile goes in the next batch.
    socket.send([this.topic, seq, payload]).then(
      () => this.sent(),
      () => this.sent(),
    );
  };

  private sent(): void {
    this.sending = false;
    if (this.pending.length > 0 && !this.scheduled) {
      this.scheduled = true;
      setImmediate(this.flush);
    }
  }
}
