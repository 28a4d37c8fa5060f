// The engine supervisor keeps secrets on the host: an engine gets only the host variables its
// profile names (from --pass-env and --env-file), specs name them but never hold their values.
import { existsSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { readEnviron } from '../../agent/supervisor/processes/proc.js';
import { logPath, recordPath } from '../../agent/supervisor/spec-store.js';
import { parseEnvFile, resolveHostReferences } from '../../agent/engines/host-variables.js';
import { fakeSpec, freeRange, nodeId, supervisor, tempDir, useSupervisorHarness } from '../helpers/supervisor.js';
import { rejection } from '../helpers/failures.js';

useSupervisorHarness();

describe('secrets stay on the host', () => {
  it('gives an engine the host variables its profile references, from --env-file and --pass-env, and nothing else of the agent', async () => {
    const node = nodeId('secrets');
    const stateDir = tempDir();
    const envFile = join(tempDir(), 'engine.env');
    writeFileSync(envFile, '# secrets\nexport WANDB_KEY="wandb-from-file"\nUNUSED=not-referenced\n', { mode: 0o600 });
    process.env.LLMGW_TEST_HF_TOKEN = 'hf-from-agent-env';
    process.env.LLMGW_TEST_NOT_PASSED = 'agent-only';
    try {
      const { sup } = supervisor({
        nodeId: node,
        stateDir,
        portRange: await freeRange(4),
        passEnv: ['LLMGW_TEST_HF_TOKEN'],
        envFile,
      });
      const spec = fakeSpec(node, 'demo.40.r0.a1', []);
      spec.profile!.envFromHost = { HF_TOKEN: 'LLMGW_TEST_HF_TOKEN', WANDB_API_KEY: 'WANDB_KEY' };
      const started = await sup.start(spec);
      const env = readEnviron(started.status?.pid ?? 0)!;
      expect(env).toMatchObject({
        HF_TOKEN: 'hf-from-agent-env',
        WANDB_API_KEY: 'wandb-from-file',
        LLMGW_TEST_HF_TOKEN: 'hf-from-agent-env',
      });
      expect(env.UNUSED).toBeUndefined();
      expect(env.LLMGW_TEST_NOT_PASSED).toBeUndefined();
      // The spec names the variables, never their values; files are the agent's alone.
      const record = readFileSync(recordPath(stateDir, 'demo.40.r0.a1'), 'utf8');
      expect(record).toContain('LLMGW_TEST_HF_TOKEN');
      expect(record).not.toMatch(/hf-from-agent-env|wandb-from-file/);
      expect(statSync(stateDir).mode & 0o777).toBe(0o711);
      expect(statSync(join(stateDir, 'shards')).mode & 0o777).toBe(0o700);
      expect(statSync(recordPath(stateDir, 'demo.40.r0.a1')).mode & 0o777).toBe(0o600);
      expect(statSync(logPath(stateDir, 'demo.40.r0.a1')).mode & 0o777).toBe(0o600);

      const missing = fakeSpec(node, 'demo.41.r0.a1', [], [4, 5]);
      missing.profile!.envFromHost = { HF_TOKEN: 'NOT_GIVEN_TOKEN' };
      const failure = await rejection(sup.start(missing));
      expect(failure.type).toBe('HostEnvMissing');
      expect(failure.nonRetryable).toBe(true);
      expect(failure.message).toMatch(
        /takes HF_TOKEN \(from NOT_GIVEN_TOKEN\) from this host.*--pass-env NOT_GIVEN_TOKEN or put it in its --env-file/,
      );
      expect(existsSync(recordPath(stateDir, 'demo.41.r0.a1'))).toBe(false);
    } finally {
      delete process.env.LLMGW_TEST_HF_TOKEN;
      delete process.env.LLMGW_TEST_NOT_PASSED;
    }
  });

  it('reads an env file of NAME=value lines and names a bad line by its number, never its value', () => {
    expect(parseEnvFile('A=1\n# c\n\nexport B = "two words"\nC=\'x=y\'\n', 'f')).toEqual({ A: '1', B: 'two words', C: 'x=y' });
    expect(() => parseEnvFile('A=1\nsecret-value-without-name\n', 'f')).toThrow(/^f line 2: expected NAME=value/);
    expect(() => parseEnvFile('A=1\nsecret-value-without-name\n', 'f')).not.toThrow(/secret-value/);
  });

  it('looks host variables up as own properties only: {fromHost: constructor} finds nothing, __proto__ is a variable', () => {
    const dir = tempDir();
    const envFile = join(dir, 'engine.env');
    writeFileSync(envFile, '__proto__=from-file\n', { mode: 0o600 });
    for (const name of ['constructor', 'toString', 'hasOwnProperty', 'valueOf']) {
      const spec = fakeSpec('n', 'demo.42.r0.a1', []);
      spec.profile!.envFromHost = { X: name };
      expect(() => resolveHostReferences(spec, { passEnv: [], envFile }), name).toThrow(new RegExp(`was not given ${name}`));
      expect(() => resolveHostReferences(spec, { passEnv: [name] }), name).toThrow(new RegExp(`was not given ${name}`));
    }
    const spec = fakeSpec('n', 'demo.43.r0.a1', []);
    spec.profile!.envFromHost = { X: '__proto__' };
    expect({ ...resolveHostReferences(spec, { passEnv: [], envFile }) }).toEqual({ X: 'from-file' });
  });
});
