// `llmgw up` stops within 20 s of Ctrl-C whatever Temporal's state: here its dev server is
// killed first, so every teardown call to Temporal meets a server that is gone. And a part that
// cannot start (its port taken) fails the start at once, saying why, leaving nothing running.
import { createServer, type Server } from 'node:net';
import { afterAll, describe, expect, it } from 'vitest';
import { isAlive } from '../../common/proc-stat.js';
import { signalGroup } from '../../agent/supervisor/processes/proc.js';
import { enginesOf, eventually, stopAll, type LlmgwProcess } from '../helpers/processes.js';
import { freeOffset, spawnUp } from '../helpers/up.js';

let up: LlmgwProcess | undefined;
let serverPid: number | undefined;

afterAll(async () => {
  if (serverPid !== undefined && isAlive(serverPid)) signalGroup(serverPid, 'SIGKILL');
  // SIGTERM first: `up` stops what it started (its parts run in their own process groups).
  await up?.stop(25_000);
  await stopAll();
});

describe('llmgw up', () => {
  it('stops within 20 s on Ctrl-C after its dev server was killed, leaving no engine', async () => {
    const prefix = `up${Date.now().toString(36)}`;
    up = (await spawnUp(prefix, ['--replicas', '1'])).proc;
    await up.waitForOutput(/llmgw is up/, 180_000);
    expect(enginesOf([`${prefix}-a`, `${prefix}-b`])).toHaveLength(1);
    serverPid = Number(/Temporal \S+ \(pid (\d+)\)/.exec(up.output())![1]);
    signalGroup(serverPid, 'SIGKILL');
    await eventually('the dev server gone', () => !isAlive(serverPid!), 10_000);

    const pressed = Date.now();
    process.kill(up.pid, 'SIGINT');
    // Bounded, so that a stop that hangs fails here with what `up` printed, not as a bare timeout.
    const code = await Promise.race([up.exited, new Promise<'hung'>((r) => setTimeout(() => r('hung'), 60_000))]);
    if (code === 'hung') throw new Error(`llmgw up did not exit within 60 s of Ctrl-C; output:\n${up.output().slice(-4000)}`);
    const took = Date.now() - pressed;
    console.log(`llmgw up stopped ${took} ms after Ctrl-C with its dev server killed`);
    expect(code).toBe(0);
    expect(took).toBeLessThan(20_000);
    expect(up.output()).toMatch(/stopped in \d+\.\d s/);
    expect(enginesOf([`${prefix}-a`, `${prefix}-b`])).toEqual([]);
  }, 300_000);

  it('starts again on its dev server after a code change, ending the runs no worker serves any more', async () => {
    const prefix = `upr${Date.now().toString(36)}`;
    const first = await spawnUp(prefix, ['--replicas', '1']);
    up = first.proc;
    await up.waitForOutput(/llmgw is up/, 180_000);
    process.kill(up.pid, 'SIGINT');
    expect(await up.exited).toBe(0);
    // Another build id is what a code change makes: the runs the first start left are pinned
    // to a build no worker serves, and would hold the agents' registrations for ever.
    const started = Date.now();
    up = (await spawnUp(prefix, ['--replicas', '1'], first.offset, { cwd: first.cwd, env: { LLMGW_BUILD_ID: `restart-${prefix}` } })).proc;
    await up.waitForOutput(/llmgw is up/, 180_000);
    console.log(`second llmgw up on the same dev server was up in ${Date.now() - started} ms`);
    expect(up.output()).toMatch(/ended \d+ run\(s\) of earlier builds/);
    expect(enginesOf([`${prefix}-a`, `${prefix}-b`])).toHaveLength(1);
    process.kill(up.pid, 'SIGINT');
    expect(await up.exited).toBe(0);
    up = undefined;
  }, 420_000);

  it('fails its start at once when a part cannot bind its port, saying which and why, and leaves nothing running', async () => {
    const prefix = `upx${Date.now().toString(36)}`;
    const offset = await freeOffset();
    // Someone else holds the first agent's admin port.
    const squatter: Server = createServer();
    await new Promise<void>((r) => squatter.listen(7401 + offset, '127.0.0.1', r));
    try {
      const failing = (await spawnUp(prefix, ['--replicas', '1'], offset)).proc;
      const code = await Promise.race([failing.exited, new Promise<'hung'>((r) => setTimeout(() => r('hung'), 90_000))]);
      if (code === 'hung') {
        await failing.stop(25_000);
        throw new Error(`llmgw up did not give up within 90 s; output:\n${failing.output().slice(-4000)}`);
      }
      const output = failing.output();
      expect(code, output).not.toBe(0);
      expect(output).toContain(`agent-${prefix}-a exited (code 1) while the stack was starting`);
      expect(output).toContain(`admin API cannot listen on 127.0.0.1:${7401 + offset}`);
      const devServer = Number(/Temporal \S+ \(pid (\d+)\)/.exec(output)?.[1]);
      expect(Number.isInteger(devServer), output).toBe(true);
      await eventually("the stack's dev server gone", () => !isAlive(devServer), 10_000);
      expect(enginesOf([`${prefix}-a`, `${prefix}-b`])).toEqual([]);
    } finally {
      await new Promise((r) => squatter.close(r));
    }
  }, 150_000);
});
