// The failure type of a batch activity that cannot work on this control worker (no file store,
// no router URL, an unreadable key file): retrying will not mend it. Safe to import from workflows.
export const BATCH_NOT_CONFIGURED = 'BatchNotConfigured';
