// One engine's KV-cache event stream as a router follows it: a ZeroMQ SUB socket on the engine's
// publisher (vLLM's --kv-events-config; fake-engine/kv-events.ts has the wire format), decoded
// into an index of the blocks the engine holds. Router side; policies/affinity-table.ts asks it what is cached.
//
// The index is trusted only while the stream is: not from a disconnect until the engine's next
// message (the index is emptied at the disconnect: an engine that restarted holds nothing, and
// events published meanwhile are lost), and not when the router sent work there more than
// STALE_MS ago (work stores blocks, so events were due) and heard nothing since. A batch whose
// sequence number does not follow the last one (a lost message) empties the index too: a router
// that under-reports a cache only routes as if it were colder. Meanwhile the router scores that
// replica approximately, by its homes.
import { decode } from '@msgpack/msgpack';
import { Subscriber } from 'zeromq';
import { blockKey, KvIndex, MAX_BLOCKS_PER_REPLICA } from './block-index.js';

/** How long work may go unanswered by events before the stream is taken as stopped. */
export const STALE_MS = 1000;

export type KvStreamState = 'live' | 'down' | 'silent';

export class KvEventStream {
  readonly index: KvIndex;
  private socket: Subscriber | undefined;
  private connected = false;
  /** Disconnected since the last message: not trusted until the engine publishes again. */
  private resync = true;
  /** The last batch's sequence number; -1 before the first. */
  private lastSeq = -1n;
  /** performance.now() by which an event is due (work was sent); 0 when none is. */
  private dueBy = 0;
  /** Tokens per block, from the engine's BlockStored events; 0 until one came. */
  blockSize = 0;
  events = 0;
  resets = 0;

  constructor(
    readonly address: string,
    private readonly topic = '',
    capacity = MAX_BLOCKS_PER_REPLICA,
  ) {
    this.index = new KvIndex(capacity);
  }

  start(): void {
    // ZeroMQ reconnects by itself (every 100 ms here) to an engine that went away and came back.
    const socket = new Subscriber({ linger: 0, reconnectInterval: 100, reconnectMaxInterval: 1000 });
    this.socket = socket;
    socket.events.on('connect', () => {
      this.connected = true;
    });
    socket.events.on('disconnect', () => {
      // What happened while away cannot be known (an engine that restarted, events missed; a
      // reconnected subscriber also misses what is published before its subscription lands), so
      // the index starts again from the next message.
      this.connected = false;
      this.index.clear();
      this.resync = true;
    });
    socket.subscribe(this.topic);
    socket.connect(this.address);
    void this.receive(socket);
  }

  close(): void {
    this.socket?.close();
    this.socket = undefined;
    this.connected = false;
  }

  state(now: number): KvStreamState {
    if (!this.connected || this.resync || this.blockSize === 0) return 'down';
    if (this.dueBy !== 0 && now > this.dueBy) return 'silent';
    return 'live';
  }

  live(now: number): boolean {
    return this.state(now) === 'live';
  }

  /** Work that will store blocks was sent there: events should follow within STALE_MS. */
  expectEvents(now: number): void {
    if (this.dueBy === 0) this.dueBy = now + STALE_MS;
  }

  private async receive(socket: Subscriber): Promise<void> {
    try {
      for await (const frames of socket) this.onMessage(frames);
    } catch {
      // Closed: the endpoint left the table or the router is stopping.
    }
  }

  /** One message: [topic, seq, payload]. Malformed ones are skipped (the engine is not ours to trust). */
  onMessage(frames: Buffer[]): void {
    const [, seqFrame, payload] = frames;
    if (seqFrame === undefined || payload === undefined || seqFrame.length !== 8) return;
    const seq = seqFrame.readBigInt64BE(0);
    if (this.lastSeq >= 0n && seq !== this.lastSeq + 1n) {
      this.index.clear();
      this.resets++;
    }
    this.lastSeq = seq;
    // Something from the engine: the stream is alive, whatever the batch holds.
    this.connected = true;
    this.resync = false;
    this.dueBy = 0;
    let batch: unknown;
    try {
      batch = decode(payload, { useBigInt64: true });
    } catch {
      return;
    }
    if (!Array.isArray(batch) || !Array.isArray(batch[1])) return;
    for (const event of batch[1] as unknown[]) this.apply(event);
  }

  private apply(raw: unknown): void {
    const event = asTaggedArray(raw);
    if (event === undefined) return;
    this.events++;
    switch (event[0]) {
      case 'BlockStored': {
        const hashes = event[1];
        if (typeof event[4] === 'number' && event[4] > 0) this.blockSize = event[4];
        if (Array.isArray(hashes)) for (const h of hashes) this.index.add(blockKey(h));
        return;
      }
      case 'BlockRemoved': {
        const hashes = event[1];
        if (Array.isArray(hashes)) for (const h of hashes) this.index.remove(blockKey(h));
        return;
      }
      case 'AllBlocksCleared':
        this.index.clear();
        return;
      default:
        // A newer engine's event we do not know says nothing about the blocks we track.
        return;
    }
  }
}

/**
 * An event as a tagged array `[type, block_hashes, parent, token_ids, block_size, …]`. vLLM up
 * to 0.10 sent that layout; vLLM 0.34 sends a map (`KVCacheEvent` is tagged but not
 * `array_like`: `{"type": "BlockStored", "block_hashes": […], "block_size": 16, …}`,
 * vllm/distributed/kv_events.py:42-68), so a map is read into the same order. Anything else: undefined.
 */
export function asTaggedArray(event: unknown): unknown[] | undefined {
  if (Array.isArray(event)) return event;
  if (typeof event !== 'object' || event === null) return undefined;
  const map = event as Record<string, unknown>;
  if (typeof map.type !== 'string') return undefined;
  return [map.type, map.block_hashes, map.parent_block_hash, map.token_ids, map.block_size];
}

/**
 * Where an engine publishes, from --kv-events: `off`; `PORT` (every engine on its own host, at
 * vLLM's default 5557 say); `+N` (the engine's HTTP port plus N: several engines on one host);
 * optionally `@TOPIC` after either. The host is the engine's own. Throws naming what is wrong.
 */
export function parseKvEventsSpec(spec: string | undefined): ((url: string) => string | undefined) | undefined {
  if (spec === undefined || spec.trim() === '' || spec.trim() === 'off') return undefined;
  const match = /^(\+?)(\d+)$/.exec(spec.trim());
  if (match === null) throw new Error(`--kv-events "${spec}" must be off, PORT or +OFFSET`);
  const relative = match[1] === '+';
  const n = Number(match[2]);
  return (url) => {
    let parsed: URL;
    try {
      parsed = new URL(url);
    } catch {
      return undefined;
    }
    const httpPort = Number(parsed.port || (parsed.protocol === 'https:' ? 443 : 80));
    const port = relative ? httpPort + n : n;
    if (port <= 0 || port > 65535) return undefined;
    return `tcp://${parsed.hostname}:${port}`;
  };
}
