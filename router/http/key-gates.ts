// The router's gates (limits.ts) by API key, replaced whole when the keys file is read again
// (key-reload.ts) without losing a kept key's requests in flight. Router side.
import type { KeyMetrics } from '../metrics.js';
import type { ApiKey, ApiKeys } from './auth.js';
import { KeyGate } from './limits.js';

export class KeyGates {
  /** By ApiKey.fingerprint: a key read again from a reloaded file keeps its gate. */
  private byFingerprint = new Map<string, KeyGate>();

  constructor(
    private readonly metricsFor: (key: ApiKey) => KeyMetrics,
    /** The share of each key's limits this process enforces (1 / router processes). */
    private readonly share: number,
  ) {}

  get(key: ApiKey): KeyGate | undefined {
    return this.byFingerprint.get(key.fingerprint);
  }

  /**
   * Gates for these keys from now on: a key kept keeps its gate, in-flight count included, with
   * its new scope and limits; a removed key is refused from its next request (requests it has in
   * flight finish and release its old gate). Says what changed, by counts, never by key.
   */
  replace(keys: ApiKeys): string {
    const next = new Map<string, KeyGate>();
    let added = 0;
    for (const key of keys.keys) {
      // The first entry of a key is the one ApiKeys.check() answers with.
      if (next.has(key.fingerprint)) continue;
      const kept = this.byFingerprint.get(key.fingerprint);
      if (kept) kept.reconfigure(key);
      else added++;
      next.set(key.fingerprint, kept ?? new KeyGate(key, this.metricsFor(key), this.share));
    }
    const removed = [...this.byFingerprint.keys()].filter((f) => !next.has(f)).length;
    this.byFingerprint = next;
    return `${keys.size} key(s): ${added} added, ${removed} removed, ${next.size - added} kept`;
  }
}
