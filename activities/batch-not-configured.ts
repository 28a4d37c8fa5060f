// The failure type of a batch activity that cannot work on this control worker (no file store,
// no router URL, an unreadable key file): retrying will not mend it. Safe to import from workflows.
export const BATCH_NOT_CONFIGURED = 'BatchNotConfigured';
/**
 * The failure type of a batch activity asked to act for a batch no router granted (batches/
 * batch-grant.ts: a workflow started by hand, or one that says otherwise than its grant).
 */
export const BATCH_NOT_GRANTED = 'BatchNotGranted';
/** The failure type of a batch activity asked to run lines after its grant's completion window. */
export const BATCH_WINDOW_ENDED = 'BatchWindowEnded';
