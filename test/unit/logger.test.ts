// The one logger of every llmgw process: JSON lines off a terminal, levels from
// LLMGW_LOG_LEVEL, secrets' fields never written, and the Temporal SDK's logs carried through it.
import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { createLogger, lineLog, logLevelFromEnv, prettyOutput, readableLogLine, temporalLogger } from '../../common/logger.js';

function capture(): { stream: Writable; lines: () => Record<string, unknown>[] } {
  const chunks: string[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      chunks.push(chunk.toString());
      done();
    },
  });
  return {
    stream,
    lines: () =>
      chunks
        .join('')
        .split('\n')
        .filter(Boolean)
        .map((line) => JSON.parse(line) as Record<string, unknown>),
  };
}

describe('logger', () => {
  it('writes one JSON object a line, naming the process, with the level and an ISO time', () => {
    const out = capture();
    const logger = createLogger('agent', { destination: out.stream, level: 'info' }).child({ nodeId: 'gpu-1' });
    logger.info('registered');
    logger.debug('not shown at info');
    lineLog(logger)('could not kill pid 4', 'warn');
    const [first, second, ...rest] = out.lines();
    expect(rest).toEqual([]);
    expect(first).toMatchObject({ component: 'agent', nodeId: 'gpu-1', level: 30, msg: 'registered' });
    expect(String(first?.time)).toMatch(/^\d{4}-\d\d-\d\dT/);
    expect(second).toMatchObject({ level: 40, msg: 'could not kill pid 4' });
  });

  it('never writes an env, token or key field, whatever a caller passes', () => {
    const out = capture();
    const logger = createLogger('worker', { destination: out.stream, level: 'info' });
    logger.info({ env: { HF_TOKEN: 'hf_secret' }, spec: { env: { A: 'b' } }, token: 't', apiKey: 'k' }, 'starting');
    const text = JSON.stringify(out.lines());
    expect(text).not.toMatch(/hf_secret|"t"|"k"|"b"/);
    expect(text).toContain('[redacted]');
  });

  it('reads its level and format from the environment and names the bad value', () => {
    expect(logLevelFromEnv({ LLMGW_LOG_LEVEL: 'DEBUG' })).toBe('debug');
    expect(logLevelFromEnv({})).toBe('info');
    expect(() => logLevelFromEnv({ LLMGW_LOG_LEVEL: 'loud' })).toThrow(/LLMGW_LOG_LEVEL=loud: use one of trace/);
    expect(prettyOutput({}, true)).toBe(true);
    expect(prettyOutput({}, false)).toBe(false);
    expect(prettyOutput({ LLMGW_LOG_FORMAT: 'json' }, true)).toBe(false);
    expect(() => prettyOutput({ LLMGW_LOG_FORMAT: 'xml' }, true)).toThrow(/json or pretty/);
  });

  it('carries the Temporal SDK logs at their level, with plain metadata', () => {
    const out = capture();
    const sdk = temporalLogger(createLogger('worker', { destination: out.stream, level: 'debug' }));
    sdk.warn('Workflow task failed', { workflowId: 'replica/demo/1', [Symbol('ts')]: 1n, attempt: 3n });
    sdk.log('DEBUG', 'poll');
    sdk.trace('dropped');
    expect(out.lines()).toMatchObject([
      { level: 40, msg: 'Workflow task failed', workflowId: 'replica/demo/1', attempt: '3', source: 'temporal-sdk' },
      { level: 20, msg: 'poll' },
    ]);
  });

  it('quotes a JSON log record as its message and error, and any other line as it is', () => {
    const out = capture();
    createLogger('worker', { destination: out.stream, level: 'info' }).error(
      { err: new Error('connect ECONNREFUSED 127.0.0.1:7233') },
      'cannot reach Temporal',
    );
    const written = JSON.stringify(out.lines()[0]);
    expect(readableLogLine(written)).toBe('cannot reach Temporal: connect ECONNREFUSED 127.0.0.1:7233');
    expect(readableLogLine('{"level":30,"msg":"registered"}')).toBe('registered');
    expect(readableLogLine('llmgw: admin API cannot listen on 127.0.0.1:7401')).toBe('llmgw: admin API cannot listen on 127.0.0.1:7401');
    expect(readableLogLine('{"not":"ours"}')).toBe('{"not":"ours"}');
    expect(readableLogLine('{truncated')).toBe('{truncated');
  });
});
