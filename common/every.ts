// Background work on a timer that never runs twice at once: a run still going when the next
// is due is skipped, not queued. For the control worker's watchers (and any side's).

/**
 * Runs `task` now and then every `everyMs`; returns a stop function. The timer does not keep
 * the process alive. `task` handles its own failures: a rejection here would go unhandled.
 */
export function everyWithoutOverlap(everyMs: number, task: () => Promise<void>): () => void {
  let running = false;
  const run = (): void => {
    if (running) return;
    running = true;
    void task().finally(() => (running = false));
  };
  run();
  const timer = setInterval(run, everyMs);
  timer.unref();
  return () => clearInterval(timer);
}
