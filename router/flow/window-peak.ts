// The highest a count has been over the last few seconds, kept as one maximum per second in a
// small ring: what the requests above sheddable have needed at their recent peak, so that a
// batch leaves them that many slots (flow/tenant-shares.ts). Router side; pure bookkeeping.

/** How far back a peak is remembered: long enough to span a burst of Poisson arrivals, short enough to give spare slots back soon after. */
export const PEAK_WINDOW_MS = 10_000;
const BUCKET_MS = 1000;
const BUCKETS = PEAK_WINDOW_MS / BUCKET_MS;

export class WindowPeak {
  private readonly maxima = new Array<number>(BUCKETS).fill(0);
  /** The bucket (Math.floor(now / BUCKET_MS)) the ring was last moved to. */
  private bucket = -Infinity;
  /** The count as last noted: what held through the buckets since. */
  private last = 0;

  /** The count is `value` now. */
  note(value: number, now: number): void {
    this.advance(now);
    const at = this.bucket % BUCKETS;
    this.maxima[at] = Math.max(this.maxima[at] ?? 0, value);
    this.last = value;
  }

  /** The highest the count has been in the window. */
  peak(now: number): number {
    this.advance(now);
    let highest = 0;
    for (const m of this.maxima) highest = Math.max(highest, m);
    return highest;
  }

  /** Moves to `now`'s bucket: the buckets passed over held the count as last noted. */
  private advance(now: number): void {
    const bucket = Math.floor(now / BUCKET_MS);
    if (bucket <= this.bucket) return;
    const passed = Math.min(BUCKETS, bucket - this.bucket);
    for (let i = 1; i <= passed; i++) this.maxima[(bucket - passed + i) % BUCKETS] = this.last;
    this.bucket = bucket;
  }
}
