// The one structured logger of every llmgw process (agent, control worker, `llmgw up`, and the
// Temporal SDK's own logs through the Runtime): pino, JSON lines when stdout is not a terminal,
// pino-pretty when it is; level from LLMGW_LOG_LEVEL. Process side; never import from workflows.
import pino, { type Level } from 'pino';
import pretty from 'pino-pretty';
import type { Logger as TemporalLogger, LogLevel as TemporalLogLevel, LogMetadata } from '@temporalio/common';

export type Logger = pino.Logger;

/** A level for the narrow `log(line, level)` callbacks that the agent's inner parts take. */
export type LineLevel = 'debug' | 'info' | 'warn' | 'error';
export type LineLog = (line: string, level?: LineLevel) => void;

const LEVELS: readonly string[] = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'];

// Fields whose values are never written, whatever a caller passes: an engine's environment
// and credentials of any kind. Values of host secrets never reach a log call in the first
// place (the agent resolves them at spawn); this is the second fence.
const REDACT = [
  'env',
  '*.env',
  'token',
  '*.token',
  'apiKey',
  '*.apiKey',
  'password',
  '*.password',
  'authorization',
  '*.authorization',
  'headers.authorization',
];

/** LLMGW_LOG_LEVEL (trace, debug, info, warn, error, fatal, silent); info when unset. */
export function logLevelFromEnv(env: NodeJS.ProcessEnv = process.env): Level | 'silent' {
  const value = (env.LLMGW_LOG_LEVEL ?? 'info').trim().toLowerCase();
  if (!LEVELS.includes(value)) throw new Error(`LLMGW_LOG_LEVEL=${env.LLMGW_LOG_LEVEL}: use one of ${LEVELS.join(', ')}`);
  return value as Level | 'silent';
}

/** Pretty on a terminal, JSON otherwise; LLMGW_LOG_FORMAT=json|pretty overrides the guess. */
export function prettyOutput(env: NodeJS.ProcessEnv = process.env, isTTY = Boolean(process.stdout.isTTY)): boolean {
  const format = env.LLMGW_LOG_FORMAT?.trim().toLowerCase();
  if (format === 'json') return false;
  if (format === 'pretty') return true;
  if (format !== undefined && format !== '') throw new Error(`LLMGW_LOG_FORMAT=${env.LLMGW_LOG_FORMAT}: use json or pretty`);
  return isTTY;
}

export interface LoggerOptions {
  /** Where lines go (tests); stdout by default. */
  destination?: pino.DestinationStream;
  level?: Level | 'silent';
  pretty?: boolean;
}

/** The root logger of a process; `component` names the process in every line. */
export function createLogger(component: string, options: LoggerOptions = {}): Logger {
  const level = options.level ?? logLevelFromEnv();
  const usePretty = options.pretty ?? prettyOutput();
  // Synchronous writes: these processes log little, and a line written just before
  // process.exit (a bounded shutdown) must not be lost in a buffer.
  const destination =
    options.destination ??
    (usePretty
      ? pretty({
          sync: true,
          colorize: !process.env.NO_COLOR,
          translateTime: 'SYS:HH:MM:ss.l',
          ignore: 'pid,hostname,component,nodeId',
          messageFormat: '{component}{if nodeId} {nodeId}{end}: {msg}',
        })
      : pino.destination({ dest: 1, sync: true }));
  return pino(
    {
      level,
      base: { component },
      timestamp: pino.stdTimeFunctions.isoTime,
      redact: { paths: REDACT, censor: '[redacted]' },
    },
    destination,
  );
}

/**
 * One line of a log file our processes wrote, as a person reads it: a JSON record becomes its
 * message (and its error's, if it carries one); any other line is returned as it is. For
 * quoting a part's log on a terminal (`llmgw up` saying why a part stopped).
 */
export function readableLogLine(line: string): string {
  if (!line.startsWith('{')) return line;
  try {
    const record = JSON.parse(line) as { msg?: unknown; err?: { message?: unknown } };
    if (typeof record.msg !== 'string') return line;
    const error = typeof record.err?.message === 'string' && record.err.message !== record.msg ? `: ${record.err.message}` : '';
    return `${record.msg}${error}`;
  } catch {
    return line;
  }
}

/** A `log(line, level)` callback writing to `logger` (for parts that narrate in lines). */
export function lineLog(logger: Logger): LineLog {
  return (line, level = 'info') => logger[level](line);
}

const TEMPORAL_LEVELS: Record<TemporalLogLevel, Level> = { TRACE: 'trace', DEBUG: 'debug', INFO: 'info', WARN: 'warn', ERROR: 'error' };

/** Temporal metadata carries symbol keys (its own timestamp) and may carry bigints: keep plain fields. */
function plainMeta(meta: LogMetadata | undefined): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  if (!meta) return out;
  for (const key of Object.keys(meta)) {
    const value: unknown = meta[key];
    out[key] = typeof value === 'bigint' ? value.toString() : value;
  }
  return out;
}

/** The Temporal SDK's Logger interface over our logger, for Runtime.install({ logger }). */
export function temporalLogger(logger: Logger): TemporalLogger {
  const sdk = logger.child({ source: 'temporal-sdk' });
  const log = (level: TemporalLogLevel, message: string, meta?: LogMetadata): void => {
    sdk[TEMPORAL_LEVELS[level] ?? 'info'](plainMeta(meta), message);
  };
  return {
    log,
    trace: (message, meta) => log('TRACE', message, meta),
    debug: (message, meta) => log('DEBUG', message, meta),
    info: (message, meta) => log('INFO', message, meta),
    warn: (message, meta) => log('WARN', message, meta),
    error: (message, meta) => log('ERROR', message, meta),
  };
}
