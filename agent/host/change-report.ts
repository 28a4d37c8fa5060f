// Reports that travel only when what they describe changes: the running shards and the weights
// held, each told to the node workflow by signal. Agent side. Looked at locally every few
// seconds and shortly after each change; nothing reaches Temporal while the value is steady,
// and a send that fails is retried at the next look.

const CHECK_EVERY_MS = 15_000;

export interface ChangeReport {
  /** Something may have changed: look again shortly. */
  changed(): void;
  /** The node now knows the value whose key is `known` (it registered): compare from there. */
  known(key: string): void;
  close(): void;
}

export function createChangeReport<T>(deps: {
  /** What the report is about, for log lines ("running shards"). */
  what: string;
  read(): T;
  /** Equal keys mean nothing to tell. */
  key(value: T): string;
  send(value: T): Promise<void>;
  log(line: string): void;
  /** How long after a change to look. */
  afterChangeMs: number;
}): ChangeReport {
  // undefined: the node has not registered, so there is nobody to tell yet.
  let sent: string | undefined;
  let soon: NodeJS.Timeout | undefined;
  const check = (): void => {
    if (sent === undefined) return;
    let value: T;
    try {
      value = deps.read();
    } catch (error) {
      deps.log(`could not read the ${deps.what}: ${error instanceof Error ? error.message : String(error)}`);
      return;
    }
    const key = deps.key(value);
    if (key === sent) return;
    const previous = sent;
    sent = key;
    deps.send(value).catch((error: unknown) => {
      sent = previous;
      deps.log(`could not report the ${deps.what}: ${error instanceof Error ? error.message : String(error)}`);
    });
  };
  const timer = setInterval(check, CHECK_EVERY_MS);
  timer.unref();
  return {
    changed() {
      if (soon) clearTimeout(soon);
      soon = setTimeout(check, deps.afterChangeMs);
      soon.unref();
    },
    known(key) {
      sent = key;
    },
    close() {
      clearInterval(timer);
      if (soon) clearTimeout(soon);
    },
  };
}
