// Looks at a page of the Temporal Web UI as an operator would: a headless Chromium renders it
// (the UI is a single-page app: what it shows comes from its own API calls after the page
// loads), driven over the DevTools protocol, and the text it shows is read back. For the
// network tests' check that what the control plane concluded about a node is visible there.
// Chromium is Debian's `chromium` package (`apt-get install -y chromium`), or LLMGW_CHROMIUM.
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { WebSocket } from 'undici';

/** The Chromium to use, or undefined when there is none here. */
export function chromiumPath(): string | undefined {
  const candidates = [process.env.LLMGW_CHROMIUM, 'chromium', 'chromium-browser', 'google-chrome'].filter(Boolean) as string[];
  for (const candidate of candidates) {
    try {
      execFileSync('sh', ['-c', `command -v "${candidate}"`], { stdio: 'pipe' });
      return candidate;
    } catch {
      // Not this one.
    }
  }
  return undefined;
}

/**
 * The Web UI page of one workflow run, on one of its tabs: `user-metadata` shows its summary
 * and its current details (setCurrentDetails), `search-attributes` and `memo` what they say.
 */
export function workflowPageUrl(webUiUrl: string, workflowId: string, runId: string, tab = 'user-metadata', namespace = 'default'): string {
  return `${webUiUrl}/namespaces/${namespace}/workflows/${encodeURIComponent(workflowId)}/${runId}/${tab}`;
}

/**
 * The text a page shows, with its frames': the Web UI renders Markdown (a workflow's current
 * details) in a frame of its own origin (/render).
 */
const PAGE_TEXT = `[document.body ? document.body.innerText : '',
  ...[...document.querySelectorAll('iframe')].map((f) => { try { return f.contentDocument?.body?.innerText ?? ''; } catch { return ''; } })
].join(String.fromCharCode(10))`;

/**
 * Renders `url` in a headless Chromium and returns the text the page shows once `until` holds
 * for it (the page keeps loading what it shows; it is read every half second), or throws with
 * the last text seen after `timeoutMs` (default 60 s).
 */
export async function renderedText(url: string, until: (text: string) => boolean, timeoutMs = 60_000): Promise<string> {
  const chromium = chromiumPath();
  if (!chromium) throw new Error('no chromium here (apt-get install -y chromium, or set LLMGW_CHROMIUM)');
  const profile = mkdtempSync(join(tmpdir(), 'llmgw-chromium-'));
  const child = spawn(
    chromium,
    [
      '--headless=new',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-dev-shm-usage',
      '--no-first-run',
      '--remote-debugging-address=127.0.0.1',
      '--remote-debugging-port=0',
      `--user-data-dir=${profile}`,
      '--window-size=1600,2400',
      'about:blank',
    ],
    { stdio: ['ignore', 'ignore', 'pipe'], detached: true },
  );
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  let socket: WebSocket | undefined;
  try {
    const browserWs = await new Promise<string>((resolve, reject) => {
      let err = '';
      const timer = setTimeout(() => reject(new Error(`chromium did not start its DevTools endpoint: ${err.slice(-500)}`)), 30_000);
      child.stderr!.on('data', (chunk: Buffer) => {
        err += chunk.toString();
        const match = /DevTools listening on (ws:\/\/\S+)/.exec(err);
        if (match) {
          clearTimeout(timer);
          resolve(match[1]!);
        }
      });
      child.once('exit', (code) => reject(new Error(`chromium exited (${code}): ${err.slice(-500)}`)));
    });
    const port = new URL(browserWs).port;
    const targets = (await (await fetch(`http://127.0.0.1:${port}/json/list`)).json()) as { type: string; webSocketDebuggerUrl: string }[];
    const page = targets.find((t) => t.type === 'page');
    if (!page) throw new Error('chromium has no page to drive');
    socket = new WebSocket(page.webSocketDebuggerUrl);
    const ws = socket;
    await new Promise<void>((resolve, reject) => {
      ws.addEventListener('open', () => resolve(), { once: true });
      ws.addEventListener('error', () => reject(new Error('cannot reach chromium over DevTools')), { once: true });
    });
    let nextId = 0;
    const waiting = new Map<number, (result: unknown) => void>();
    ws.addEventListener('message', (event) => {
      const message = JSON.parse(String(event.data)) as { id?: number; result?: unknown };
      if (message.id !== undefined) waiting.get(message.id)?.(message.result);
    });
    const send = (method: string, params: Record<string, unknown> = {}): Promise<unknown> =>
      new Promise((resolve) => {
        const id = ++nextId;
        waiting.set(id, resolve);
        ws.send(JSON.stringify({ id, method, params }));
      });
    await send('Page.navigate', { url });
    const deadline = Date.now() + timeoutMs;
    let text = '';
    for (;;) {
      const result = (await send('Runtime.evaluate', { expression: PAGE_TEXT, returnByValue: true })) as
        { result?: { value?: string } } | undefined;
      text = result?.result?.value ?? '';
      if (until(text)) return text;
      if (Date.now() > deadline)
        throw new Error(`the page never showed what was expected within ${timeoutMs / 1000} s; it showed:\n${text}`);
      await new Promise((r) => setTimeout(r, 500));
    }
  } finally {
    socket?.close();
    try {
      process.kill(-child.pid!, 'SIGKILL');
    } catch {
      // Already gone.
    }
    await exited;
    rmSync(profile, { recursive: true, force: true });
  }
}
