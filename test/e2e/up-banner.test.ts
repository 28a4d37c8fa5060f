// `llmgw up`'s banner promises a curl that works: the test sends that very request the moment
// the banner is printed, ten times over, each on a fresh stack started as `npm start` starts it.
import { afterAll, describe, expect, it } from 'vitest';
import { enginesOf, stopAll } from '../helpers/processes.js';
import { spawnUp, type UpRun } from '../helpers/up.js';

const RUNS = 10;
let current: UpRun | undefined;

afterAll(async () => {
  await current?.proc.stop(25_000);
  await stopAll();
});

/** Resolves with the output so far as soon as it contains the banner (on the chunk that brings it). */
function banner(run: UpRun, timeoutMs: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const check = () => {
      const text = run.proc.output();
      if (/llmgw is up/.test(text) && /Ctrl-C stops everything/.test(text)) {
        clearTimeout(timer);
        run.proc.child.stdout?.off('data', check);
        resolve(text);
      }
    };
    const timer = setTimeout(() => reject(new Error(`no banner within ${timeoutMs} ms:\n${run.proc.output().slice(-3000)}`)), timeoutMs);
    run.proc.child.stdout?.on('data', check);
    void run.proc.exited.then(() => reject(new Error(`llmgw up exited before its banner:\n${run.proc.output().slice(-3000)}`)));
    check();
  });
}

/** The banner's curl as a request: its URL and its -d body. */
function bannerCurl(text: string): { url: string; body: string } {
  const match = /curl (\S+) -H 'content-type: application\/json' \\\s*\n\s*-d '([^']+)'/.exec(text);
  if (!match) throw new Error(`the banner has no curl:\n${text.slice(-2000)}`);
  return { url: match[1]!, body: match[2]! };
}

/**
 * A fresh stack's banner. The offset's ports were free when chosen, but they lie among the ones
 * the system hands out to other tests' connections: a stack that lost one of them to another
 * process (EADDRINUSE, in a part of the stack or in the dev server's own internal listeners, which
 * `llmgw up` reports and stops on) is started again on another offset,
 * three times at most. What is under test is the banner, not the luck of the draw.
 */
async function bannerOfFreshStack(run: number): Promise<{ stack: UpRun; text: string }> {
  for (let attempt = 1; ; attempt++) {
    current = await spawnUp(`ub${run}${Date.now().toString(36)}`);
    try {
      return { stack: current, text: await banner(current, 180_000) };
    } catch (error) {
      const lostAPort = /address already in use|EADDRINUSE/i.test(String(error));
      if (!lostAPort || attempt === 3) throw error;
      console.log(`run ${run + 1}: a port of offset ${current.offset} was taken meanwhile; starting again on another`);
      await current.proc.exited;
    }
  }
}

describe('llmgw up', () => {
  it(`serves the banner's curl the moment the banner appears (${RUNS} fresh stacks)`, async () => {
    const answers: number[] = [];
    for (let i = 0; i < RUNS; i++) {
      const { stack, text } = await bannerOfFreshStack(i);
      const curl = bannerCurl(text);
      const res = await fetch(curl.url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: curl.body });
      answers.push(res.status);
      if (res.status !== 200) console.log(`run ${i + 1}: ${res.status} ${await res.text()}\n${stack.proc.output().slice(-2000)}`);
      else await res.body?.cancel();
      process.kill(stack.proc.pid, 'SIGINT');
      await stack.proc.exited;
      expect(enginesOf(stack.nodeIds)).toEqual([]);
      current = undefined;
    }
    console.log(`the banner's curl answered ${answers.join(', ')}`);
    expect(answers).toEqual(Array.from({ length: RUNS }, () => 200));
  }, 1_200_000);
});
