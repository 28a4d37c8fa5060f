// The router's budget for request bodies in memory, shared by every request of one router process:
// a body is counted from its first byte (or, when it declares a Content-Length, before it is read)
// until its answer is over, so that bodies being read, held in the waiting room and in flight to
// an engine all count. Without it the waiting room alone could hold 1,000 requests of 8 MiB per
// deployment, about 8 GiB. Router side; http/core.ts refuses what does not fit with 503 and Retry-After.

/** 256 MiB: 32 bodies at the 8 MiB body limit, or thousands of ordinary chat requests. */
export const DEFAULT_HELD_BYTES = 256 * 1024 * 1024;

/** Seconds a client refused for memory should wait: held bodies leave as a replica starts or answers end. */
export const BUSY_RETRY_AFTER_S = 2;

export class ByteBudget {
  used = 0;

  constructor(readonly limit: number) {}

  /** Reserves `bytes` if they fit; false (and nothing reserved) if not. */
  take(bytes: number): boolean {
    if (this.used + bytes > this.limit) return false;
    this.used += bytes;
    return true;
  }

  give(bytes: number): void {
    this.used -= bytes;
  }
}
