// The ApplicationFailure a call ends with, for tests that check its type, message and retry flag.
import { ApplicationFailure } from '@temporalio/common';

/** The failure a synchronous call throws; fails the test when it throws nothing or something else. */
export function failureOf(fn: () => unknown): ApplicationFailure {
  try {
    fn();
  } catch (err) {
    if (err instanceof ApplicationFailure) return err;
    throw err;
  }
  throw new Error('expected an ApplicationFailure, nothing was thrown');
}

/** The failure a promise rejects with; fails the test when it resolves or rejects with something else. */
export async function rejection(p: Promise<unknown>): Promise<ApplicationFailure> {
  try {
    await p;
  } catch (err) {
    if (err instanceof ApplicationFailure) return err;
    throw err;
  }
  throw new Error('expected a failure');
}
