// A model's waiting line at the router: requests held while it has no routable replica (scaled to
// zero, or starting) or while every replica is saturated. One sub-line per API key, served in
// turn, so that one key's burst cannot push every other key's requests to the back. Router
// side; the waiting room (engines/waiting-room.ts) decides when a request joins and leaves.
import type { ExchangeResponse, RoutedRequest } from './routed-request.js';

/** Why a request was held: no replica to send it to, every one asleep (being woken), or every replica's engine has a line. */
export type HoldReason = 'no_replica' | 'sleeping' | 'saturated';

/** A request waiting at the router: everything needed to send it once a replica can take it. */
export interface Held {
  /** The served name it waits for. */
  model: string;
  res: ExchangeResponse;
  /** What it will be sent as. */
  request: RoutedRequest;
  /** When it joined the line (performance.now()). */
  heldAt: number;
  /** The API key's index; -1 without keys. */
  key: number;
  reason: HoldReason;
  timer: NodeJS.Timeout | undefined;
  /** The line it waits in; undefined once it has left. */
  line: ModelQueue | undefined;
}

/** Round robin over the keys with requests waiting, first come first served within a key. */
export class ModelQueue {
  private readonly byKey = new Map<number, Held[]>();
  /** Keys with requests waiting, in the order they take turns. */
  private keys: number[] = [];
  private turn = 0;
  size = 0;

  constructor(readonly model: string) {}

  push(held: Held): void {
    let line = this.byKey.get(held.key);
    if (line === undefined) {
      line = [];
      this.byKey.set(held.key, line);
    }
    if (line.length === 0) this.keys.push(held.key);
    line.push(held);
    held.line = this;
    this.size++;
  }

  /** The next request to send: the head of the next key's line in turn. */
  shift(): Held | undefined {
    if (this.size === 0) return undefined;
    if (this.turn >= this.keys.length) this.turn = 0;
    const key = this.keys[this.turn] as number;
    const line = this.byKey.get(key) as Held[];
    const held = line.shift() as Held;
    if (line.length === 0) {
      this.byKey.delete(key);
      this.keys.splice(this.turn, 1);
    } else this.turn++;
    held.line = undefined;
    this.size--;
    return held;
  }

  /** Takes a request out wherever it is (its client left, or it waited too long). */
  remove(held: Held): boolean {
    if (held.line !== this) return false;
    const line = this.byKey.get(held.key);
    const i = line?.indexOf(held) ?? -1;
    if (line === undefined || i < 0) return false;
    line.splice(i, 1);
    if (line.length === 0) {
      this.byKey.delete(held.key);
      const k = this.keys.indexOf(held.key);
      this.keys.splice(k, 1);
      if (k < this.turn) this.turn--;
    }
    held.line = undefined;
    this.size--;
    return true;
  }

  /** The oldest heldAt of any request waiting, or undefined. */
  oldest(): number | undefined {
    let oldest: number | undefined;
    for (const line of this.byKey.values()) {
      const head = line[0];
      if (head !== undefined && (oldest === undefined || head.heldAt < oldest)) oldest = head.heldAt;
    }
    return oldest;
  }

  /** Empties the line, handing back everything that waited. */
  takeAll(): Held[] {
    const all: Held[] = [];
    for (let h = this.shift(); h !== undefined; h = this.shift()) all.push(h);
    return all;
  }
}
