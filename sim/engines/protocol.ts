// The line protocol between `llmgw sim-fleet` and its engine host (`llmgw sim-engines`): one
// JSON object a line over a Unix socket, in both directions. Both sides of the simulated
// fleet; zod checks every line that crosses, as for any process boundary.
import { z } from 'zod';

/** One virtual process as the engine host's table has it: what /proc would show of it. */
export const VirtualProcess = z.object({
  pid: z.number().int(),
  /** The simulated host it runs on: each host sees only its own processes, as on a machine of its own. */
  scope: z.string(),
  role: z.string(),
  argv: z.array(z.string()),
  env: z.record(z.string(), z.string()),
  startTicks: z.string(),
});
export type VirtualProcess = z.infer<typeof VirtualProcess>;

export const Signal = z.enum(['SIGTERM', 'SIGINT', 'SIGKILL']);

export const Request = z.discriminatedUnion('op', [
  /** Sends the table, then every spawn and exit as it happens. */
  z.object({ op: z.literal('subscribe'), id: z.number() }),
  z.object({
    op: z.literal('launch'),
    id: z.number(),
    scope: z.string(),
    role: z.string(),
    argv: z.array(z.string()),
    env: z.record(z.string(), z.string()),
    logFile: z.string(),
  }),
  /** To the process, or to every process of its group (a virtual process leads its own). */
  z.object({ op: z.literal('signal'), id: z.number(), pid: z.number().int(), group: z.boolean(), signal: Signal }),
  /** Power off one simulated host: SIGKILL to everything it runs. */
  z.object({ op: z.literal('kill-scope'), id: z.number(), scope: z.string() }),
]);
export type Request = z.infer<typeof Request>;

export const Message = z.discriminatedUnion('kind', [
  z.object({
    kind: z.literal('reply'),
    id: z.number(),
    ok: z.boolean(),
    /** Why not, when not ok. */
    error: z.string().optional(),
    pid: z.number().optional(),
    startTicks: z.string().optional(),
  }),
  z.object({ kind: z.literal('table'), enginesPid: z.number(), processes: z.array(VirtualProcess) }),
  z.object({ kind: z.literal('spawned'), process: VirtualProcess }),
  z.object({ kind: z.literal('exited'), pid: z.number(), code: z.number().nullable(), signal: z.string().nullable() }),
]);
export type Message = z.infer<typeof Message>;

/** Splits a byte stream into lines and hands each parsed one over; a bad line is reported, not fatal. */
export function lineReader(onLine: (value: unknown) => void, onBad: (line: string, error: string) => void): (chunk: Buffer) => void {
  let buffered = '';
  return (chunk) => {
    buffered += chunk.toString('utf8');
    let newline: number;
    while ((newline = buffered.indexOf('\n')) >= 0) {
      const line = buffered.slice(0, newline);
      buffered = buffered.slice(newline + 1);
      if (line.trim() === '') continue;
      try {
        onLine(JSON.parse(line));
      } catch (error) {
        onBad(line.slice(0, 200), error instanceof Error ? error.message : String(error));
      }
    }
  };
}
