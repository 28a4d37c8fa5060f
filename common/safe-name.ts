// The one spelling allowed for a name that reaches a visibility query (`LlmgwGpuClass = '…'`)
// or a file path (state dirs, shard files): GPU classes, node ids, model and deployment names.
// Safe to import from workflows (zod and @temporalio/common only).
import { ApplicationFailure } from '@temporalio/common';
import { z } from 'zod';
import { FailureType } from './failures.js';

/** Letters, digits, ".", "_" and "-", starting with a letter or digit, at most 63 characters. */
export const SAFE_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/;

export const SAFE_NAME_RULE = 'letters, digits, ".", "_" and "-", starting with a letter or digit, at most 63 characters';

export function isSafeName(value: string): boolean {
  return SAFE_NAME.test(value);
}

/** A zod string held to SAFE_NAME, whose error names the field: "gpuClass must be …". */
export function SafeName(field: string) {
  return z.string().regex(SAFE_NAME, `${field} must be ${SAFE_NAME_RULE}`);
}

/**
 * A value quoted for a visibility query. Names are validated where they enter (catalog,
 * CLI, workflow inputs); this is the last check before a query is built, so a value that got
 * past them (an older workflow's state) fails non-retryably instead of changing the query.
 */
export function queryLiteral(field: string, value: string): string {
  if (!isSafeName(value)) {
    throw ApplicationFailure.nonRetryable(
      `${field} ${JSON.stringify(value.slice(0, 80))} cannot be used in a visibility query: it must be ${SAFE_NAME_RULE}`,
      FailureType.InvalidInput,
    );
  }
  return `'${value}'`;
}
