// The fake engine's command line: a vLLM-style argv, the flags it does not use skipped, and the
// flag that is wrong named.
import { describe, expect, it } from 'vitest';
import { words } from '../helpers/command-line.js';
import { FakeEngineArgsError, parseFakeEngineArgs } from '../../fake-engine/options.js';

describe('fake engine: command line', () => {
  it('takes a vLLM-style argv and skips the flags it does not use', () => {
    const opts = parseFakeEngineArgs(
      words(
        'serve org/model-7b --served-model-name seven --port 18000',
        '--tensor-parallel-size 2 --pipeline-parallel-size 1 --distributed-executor-backend ray',
        '--enforce-eager --max-model-len=4096 --tokens-per-second 30 --hang',
      ),
    );
    expect(opts).toMatchObject({
      model: 'org/model-7b',
      servedModelNames: ['seven'],
      port: 18000,
      host: '127.0.0.1',
      maxModelLen: 4096,
      tokensPerSecond: 30,
      hang: true,
      loadTimeS: 0,
      maxConcurrency: 256,
    });
  });

  it('names the flag that is wrong', () => {
    expect(() => parseFakeEngineArgs(['--model', 'm'])).toThrow(/--port is required/);
    expect(() => parseFakeEngineArgs(['--port', 'eighty'])).toThrow(/--port must be an integer/);
    expect(() => parseFakeEngineArgs(['--port', '1', '--load-time', '-1'])).toThrow(/--load-time must be >= 0/);
    expect(() => parseFakeEngineArgs(['--port', '1', '--nnodes', '2'])).toThrow(FakeEngineArgsError);
    expect(() => parseFakeEngineArgs(['--nnodes', '2', '--node-rank', '1', '--leader', 'nocolon'])).toThrow(/HOST:PORT/);
  });
});
