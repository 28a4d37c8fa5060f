// Publish what changed: how a long-running workflow (deployment, replica, node) shows itself —
// search attributes and memo (each write an event and a visibility update), the Web UI's
// current details (no event) and news for other workflows — each written only when what its
// readers act on changed, so a workflow that waits costs Temporal nothing. Workflow side.
import { setCurrentDetails, upsertMemo, upsertSearchAttributes } from '@temporalio/workflow';
import type { SearchAttributeUpdatePair } from '@temporalio/common';

export interface Publication {
  /** Upserts the search attributes when their content changed since the last upsert. */
  attributes(pairs: SearchAttributeUpdatePair[]): void;
  /** Upserts the memo when `key` (by default its content) changed: a key says what its readers act on. */
  memo(memo: Record<string, unknown>, key?: string): void;
  /** The Web UI's current details, set every time: they cost no event. */
  details(text: string): void;
  /** Whether news on `channel` (a signal, a notification) is due: `key` differs from the last one. */
  due(channel: string, key: string): boolean;
}

/** What a run continued from another already shows (its predecessor wrote it), so it is not written again. */
export interface AlreadyShown {
  attributes?: SearchAttributeUpdatePair[];
  memoKey?: string;
  /** Channel → the last key sent. */
  sent?: Record<string, string>;
}

export function createPublication(shown: AlreadyShown = {}): Publication {
  let attributesKey = shown.attributes ? JSON.stringify(shown.attributes) : undefined;
  let memoKey = shown.memoKey;
  const sent = new Map(Object.entries(shown.sent ?? {}));
  return {
    attributes(pairs) {
      const key = JSON.stringify(pairs);
      if (key === attributesKey) return;
      attributesKey = key;
      upsertSearchAttributes(pairs);
    },
    memo(memo, key = JSON.stringify(memo)) {
      if (key === memoKey) return;
      memoKey = key;
      upsertMemo(memo);
    },
    details(text) {
      setCurrentDetails(text);
    },
    due(channel, key) {
      if (sent.get(channel) === key) return false;
      sent.set(channel, key);
      return true;
    },
  };
}
