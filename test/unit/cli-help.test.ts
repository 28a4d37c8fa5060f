// `llmgw --help` as a new user reads it: the everyday commands before the processes and the
// simulators, and every command that starts a process answers --help with its help rather
// than starting (or refusing to start). Runs the built CLI (npm run test:unit builds it first).
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const bin = join(__dirname, '../../bin/llmgw.js');

async function llmgw(args: string[]): Promise<string> {
  const { stdout } = await promisify(execFile)(process.execPath, [bin, ...args], { timeout: 30_000 });
  return stdout;
}

describe('llmgw --help', () => {
  it('lists the everyday commands first, then the processes, then the simulators', async () => {
    const help = await llmgw(['--help']);
    const at = (command: string): number => help.search(new RegExp(`^  ${command}\\b`, 'm'));
    const order = [
      'up',
      'deploy',
      'status',
      'scale',
      'rollout',
      'undeploy',
      'logs',
      'nodes',
      'worker',
      'agent',
      'router',
      'temporal',
      'fake-engine',
      'sim-fleet',
    ];
    for (const command of order) expect(at(command), `${command} in\n${help}`).toBeGreaterThan(0);
    expect(order.map(at)).toEqual([...order.map(at)].sort((a, b) => a - b));
  });

  it.each(['agent', 'worker', 'router', 'temporal', 'temporal start-dev', 'fake-engine', 'sim-fleet', 'sim-ctl', 'sim-engines'])(
    '`llmgw %s --help` prints its help',
    async (command) => {
      const help = await llmgw([...command.split(' '), '--help']);
      expect(help).toMatch(new RegExp(`^Usage: llmgw ${command}`));
    },
  );

  it('`llmgw fake-engine -h` names the flags the fake engine reads', async () => {
    const help = await llmgw(['fake-engine', '-h']);
    expect(help).toMatch(/--port\s+HTTP port/);
    expect(help).toMatch(/--served-model-name/);
  });
});
