// The one log line a failure may carry out of a host: credentials masked, one line, bounded.
import { describe, expect, it } from 'vitest';
import { redactedSummary, redactSecrets, SUMMARY_MAX_CHARS } from '../../common/redact.js';

const HF = `hf_${'abcdefghijklmnopqrstuvwxyzABCDEFGH'}`;

describe('redacting what an engine printed', () => {
  it('masks Hugging Face, OpenAI-style, AWS, GitHub and bearer credentials but keeps the words around them', () => {
    const cases: [string, string][] = [
      [`token ${HF} rejected`, 'token hf_*** rejected'],
      ['key sk-proj-AbCdEf0123456789xyz', 'key sk-***'],
      ['using AKIAIOSFODNN7EXAMPLE for s3', 'using AKIA*** for s3'],
      ['aws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY', 'aws_secret_access_key=***'],
      ['Authorization: Bearer abcdefghijklmnop.qrs', 'Authorization: Bearer ***'],
      ['clone https://user:pa55word@example.invalid/x', 'clone https://user:***@example.invalid/x'],
      ['{"api_key": "0123456789abcdef"}', '{"api_key": "***"}'],
      ['HF_TOKEN=whatever-it-is', 'HF_TOKEN=***'],
      ['ghp_0123456789abcdefghij in the way', 'ghp_*** in the way'],
    ];
    for (const [input, want] of cases) expect(redactSecrets(input), input).toBe(want);
    expect(redactSecrets('failed to load model llmgw/fake-demo: CUDA out of memory')).toBe(
      'failed to load model llmgw/fake-demo: CUDA out of memory',
    );
  });

  it('summarises a log as its last non-blank line, masked, without control characters, cut to the limit', () => {
    expect(redactedSummary(['first', `printing ${HF}`, '', '   '])).toBe('printing hf_***');
    expect(redactedSummary(['\u001b[31merror\u001b[0m: boom'])).toBe('[31merror [0m: boom');
    expect(redactedSummary([])).toBe('');
    const long = redactedSummary(['x'.repeat(1000)]);
    expect(long.length).toBe(SUMMARY_MAX_CHARS);
    expect(long.endsWith('…')).toBe(true);
  });
});
