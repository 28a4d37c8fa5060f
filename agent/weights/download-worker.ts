// The entry of a download thread (download-threads.ts): runs the downloads it is given
// (download.ts) and reports their bytes at most every 250 ms (a message wakes the agent's
// thread), and their end. Agent side.
import { parentPort } from 'node:worker_threads';
import { downloadToFile } from './download.js';
import { serializeError, type FromDownloadThread, type ToDownloadThread } from './download-threads.js';

const REPORT_MS = 250;
const port = parentPort;
if (!port) throw new Error('download-worker.js runs as a worker thread');
const post = (message: FromDownloadThread): void => port.postMessage(message);
const running = new Map<number, AbortController>();

port.on('message', (message: ToDownloadThread) => {
  if (message.kind === 'cancel') {
    running.get(message.id)?.abort(new Error('the fetch was cancelled'));
    return;
  }
  const { id, job } = message;
  const abort = new AbortController();
  running.set(id, abort);
  let unreported = 0;
  let reportedAt = Date.now();
  const report = (): void => {
    if (unreported > 0) post({ kind: 'bytes', id, count: unreported });
    unreported = 0;
    reportedAt = Date.now();
  };
  downloadToFile(
    job,
    {
      bytes(count) {
        unreported += count;
        if (Date.now() - reportedAt >= REPORT_MS) report();
      },
      restarted: (kept) => post({ kind: 'restarted', id, kept }),
    },
    abort.signal,
  )
    .then(
      (result) => {
        report();
        post({ kind: 'done', id, result });
      },
      (error: unknown) => {
        report();
        post({ kind: 'failed', id, error: serializeError(error) });
      },
    )
    .finally(() => running.delete(id));
});
