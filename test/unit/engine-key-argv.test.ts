// An engine's key never on a command line (issue 37): an SGLang engine gets it from a config
// file only its user reads, and a stranger's reported command line has any --api-key-like
// value masked, as it is sent to Temporal in the agent's registration.
import { spawn } from 'node:child_process';
import { readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { Engine } from '../../proto/gen/llmgw/v1/shard_pb.js';
import { readCmdline, readEnviron } from '../../agent/supervisor/processes/proc.js';
import { engineConfigPath } from '../../agent/supervisor/start/engine-key.js';
import { engineKeyFor } from '../../common/engine-keys.js';
import { redactArgv } from '../../common/redact.js';
import { placeWithTestKey, ticketFor } from '../helpers/catalog-key.js';
import { FAKE_ENGINE, agentHost, extraPids, fakeSpec, tempDir, useSupervisorHarness, waitFor } from '../helpers/supervisor.js';

useSupervisorHarness();

const KEY = 'sglang-engine-key-0123456789';

describe('engine keys and command lines', () => {
  it('starts SGLang with --config FILE holding the key, 0400, and no key anywhere in its argv', async () => {
    const keyFile = join(tempDir(), 'engine.key');
    writeFileSync(keyFile, `${KEY}\n`, { mode: 0o600 });
    const { node, stateDir, startAgent } = await agentHost('sglang-key');
    // A stand-in `python3` that stays up: what matters is the argv the agent spawns it with.
    const { sup } = startAgent({
      engineKeyFile: keyFile,
      engineContext: { fakeEngineCommand: FAKE_ENGINE, pythonCommand: [process.execPath, '-e', 'setTimeout(() => {}, 30000)', '--'] },
    });
    const spec = fakeSpec(node, 'demo.71.r0.a1', [], [0]);
    spec.profile!.engine = Engine.SGLANG;
    // Placed for run chain `run-sglang`: the file holds that run's key, not the fleet's.
    placeWithTestKey(spec, { ...ticketFor(spec), chain: 'run-sglang' });
    const started = await sup.start(spec);
    const pid = started.status?.pid ?? 0;
    const argv = await waitFor('the engine argv', () => readCmdline(pid));
    expect(argv).toContain('sglang.launch_server');
    expect(argv.join(' ')).not.toContain(KEY);
    expect(argv).not.toContain('--api-key');
    const config = argv[argv.indexOf('--config') + 1]!;
    expect(config).toBe(engineConfigPath(stateDir, spec.shardId));
    expect(readFileSync(config, 'utf8')).toBe(`api-key: "${engineKeyFor(KEY, 'run-sglang')}"\n`);
    expect(statSync(config).mode & 0o777).toBe(0o400);
    expect(JSON.stringify(readEnviron(pid) ?? {})).not.toContain(KEY);
    expect(JSON.stringify(readEnviron(pid) ?? {})).not.toContain(engineKeyFor(KEY, 'run-sglang'));
  });

  it('reports a stranger with --api-key X and --hf-token=Y on its command line without X or Y', async () => {
    const { node, startAgent } = await agentHost('argv-report');
    const child = spawn(
      process.execPath,
      ['-e', 'setTimeout(() => {}, 30000)', '--', '--api-key', 'x-secret-value-1', '--hf-token=y-secret-value-2', '--port', '8000'],
      { detached: true, stdio: 'ignore', env: { PATH: process.env.PATH ?? '', LLMGW_NODE_ID: node, LLMGW_SHARD_ID: 'ghost' } },
    );
    child.unref();
    extraPids.push(child.pid!);
    await waitFor('the stranger', () => readEnviron(child.pid!));
    const { sup, logs } = startAgent({ dryRun: true });
    const { unidentified } = await sup.recover();
    expect(unidentified.map((u) => u.pid)).toEqual([child.pid]);
    const reported = unidentified[0]!.command;
    expect(reported).toMatch(/--api-key \*\*\* --hf-token=\*\*\* --port 8000$/);
    expect(JSON.stringify(unidentified) + logs.join('\n')).not.toMatch(/secret-value/);
  });

  it('masks credential-like options in both forms and leaves other words alone', () => {
    expect(redactArgv(['vllm', 'serve', 'm', '--api-key', 'k1', '--token=k2', '-password', 'k3', '--port', '1'])).toEqual([
      'vllm',
      'serve',
      'm',
      '--api-key',
      '***',
      '--token=***',
      '-password',
      '***',
      '--port',
      '1',
    ]);
    expect(redactArgv(['x', '--api-key'])).toEqual(['x', '--api-key']);
  });
});
