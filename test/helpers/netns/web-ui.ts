// Looks at a page of the Temporal Web UI as an operator would: a headless Chromium renders it
// (the UI is a single-page app: what it shows comes from its own API calls after the page
// loads), driven by puppeteer-core, and the text it shows is read back. For the network
// tests' check that what the control plane concluded about a node is visible there.
// Chromium is Debian's `chromium` package (`apt-get install -y chromium`), or LLMGW_CHROMIUM.
import { execFileSync } from 'node:child_process';
import puppeteer, { type Frame } from 'puppeteer-core';

/** The path of the Chromium to use, or undefined when there is none here. */
export function chromiumPath(): string | undefined {
  const candidates = [process.env.LLMGW_CHROMIUM, 'chromium', 'chromium-browser', 'google-chrome'].filter(Boolean) as string[];
  for (const candidate of candidates) {
    try {
      return execFileSync('sh', ['-c', `command -v "${candidate}"`], { encoding: 'utf8', stdio: 'pipe' }).trim();
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

/** The text a frame shows: the Web UI renders Markdown (a workflow's current details) in a frame of its own origin (/render). */
const frameText = async (frame: Frame): Promise<string> =>
  String(await frame.evaluate("document.body ? document.body.innerText : ''").catch(() => ''));

/**
 * Renders `url` in a headless Chromium and returns the text the page shows, its frames'
 * included, once `until` holds for it (the page keeps loading what it shows; it is read every
 * half second), or throws with the last text seen after `timeoutMs` (default 60 s).
 */
export async function renderedText(url: string, until: (text: string) => boolean, timeoutMs = 60_000): Promise<string> {
  const executablePath = chromiumPath();
  if (!executablePath) throw new Error('no chromium here (apt-get install -y chromium, or set LLMGW_CHROMIUM)');
  const browser = await puppeteer.launch({
    executablePath,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
    defaultViewport: { width: 1600, height: 2400 },
    timeout: 30_000,
  });
  try {
    const page = await browser.newPage();
    await page.goto(url, { timeout: timeoutMs });
    const deadline = Date.now() + timeoutMs;
    let text = '';
    for (;;) {
      text = (await Promise.all(page.frames().map(frameText))).join('\n');
      if (until(text)) return text;
      if (Date.now() > deadline)
        throw new Error(`the page never showed what was expected within ${timeoutMs / 1000} s; it showed:\n${text}`);
      await new Promise((r) => setTimeout(r, 500));
    }
  } finally {
    await browser.close();
  }
}
