// Masks what looks like a credential in text that is about to leave a host: the one log line
// a failure may carry into Temporal. Shared by the agent and anything else that quotes output
// it does not control. Best effort by design: the line is a hint, the log stays on the host.

/** Patterns of well-known credentials, each replaced by its recognisable prefix and `***`. */
const PATTERNS: readonly [RegExp, string][] = [
  // Hugging Face user and organisation tokens.
  [/\b(hf_|api_org_)[A-Za-z0-9]{8,}/g, '$1***'],
  // OpenAI-style keys (sk-…, sk-proj-…), Anthropic's sk-ant-… included.
  [/\bsk-[A-Za-z0-9_-]{8,}/g, 'sk-***'],
  // AWS access key ids.
  [/\b(AKIA|ASIA|AGPA|AIDA|AROA|ANPA)[A-Z0-9]{12,}/g, '$1***'],
  // GitHub and Slack tokens.
  [/\b(gh[pousr]_|github_pat_)[A-Za-z0-9_]{8,}/g, '$1***'],
  [/\bxox[abposr]-[A-Za-z0-9-]{8,}/g, 'xox*-***'],
  // JSON web tokens (three base64url parts, the first of which opens `{"`).
  [/\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*/g, 'eyJ***'],
  // Bearer and basic credentials in a header or a URL.
  [/\b(Bearer|Basic|Token)\s+[A-Za-z0-9._~+/=-]{8,}/gi, '$1 ***'],
  [/(\/\/[^/\s:@]+):[^@\s/]+@/g, '$1:***@'],
  // NAME=value or "name": "value" where the name says what it holds (AWS secret keys included).
  [
    /\b([A-Za-z0-9_]*(?:token|secret|passw(?:or)?d|api[_-]?key|access[_-]?key|credential)[A-Za-z0-9_]*)(["']?\s*[:=]\s*["']?)[^\s"',;]{4,}/gi,
    '$1$2***',
  ],
];

/** An option whose name says it holds a credential: `--api-key`, `--hf-token`, `-password`, `--aws_secret`. */
const SECRET_OPTION = /^--?[A-Za-z0-9_-]*(?:token|secret|passw(?:or)?d|api[_-]?key|access[_-]?key|credential)[A-Za-z0-9_-]*$/i;

/**
 * A process's command line as it may leave the host (another process's, which may hold its
 * owner's secrets): the value of every credential-like option masked, in both the
 * `--api-key VALUE` and the `--api-key=VALUE` forms, then the patterns above.
 */
export function redactArgv(argv: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const word = argv[i]!;
    const eq = word.indexOf('=');
    if (eq > 0 && SECRET_OPTION.test(word.slice(0, eq))) out.push(`${word.slice(0, eq)}=***`);
    else if (SECRET_OPTION.test(word) && i + 1 < argv.length) {
      out.push(word, '***');
      i++;
    } else out.push(redactSecrets(word));
  }
  return out;
}

/** Longest summary a failure carries: a hint, not the log. */
export const SUMMARY_MAX_CHARS = 200;

export function redactSecrets(text: string): string {
  let out = text;
  for (const [pattern, replacement] of PATTERNS) out = out.replace(pattern, replacement);
  return out;
}

/**
 * The one line of an engine's output a failure may quote: the last line that is not blank,
 * control characters removed, credentials masked, cut to SUMMARY_MAX_CHARS. '' when none.
 */
export function redactedSummary(lines: readonly string[]): string {
  for (let i = lines.length - 1; i >= 0; i--) {
    // eslint-disable-next-line no-control-regex -- terminal escapes and NULs are what is removed
    const line = (lines[i] ?? '').replace(/[\u0000-\u001f\u007f]+/g, ' ').trim();
    if (line === '') continue;
    const masked = redactSecrets(line);
    return masked.length > SUMMARY_MAX_CHARS ? `${masked.slice(0, SUMMARY_MAX_CHARS - 1)}…` : masked;
  }
  return '';
}
