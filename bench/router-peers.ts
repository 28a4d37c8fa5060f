// The router benchmark's outside tools: wrk as the load generator (when it is on PATH), nginx as
// a keep-alive reverse proxy peer (when it is on PATH), and CPU time per process from /proc.
// Benchmark side; nothing here is part of llmgw itself.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** The absolute path of a program on PATH, or undefined. */
export function onPath(program: string): string | undefined {
  const found = spawnSync('sh', ['-c', `command -v ${program}`], { encoding: 'utf8' });
  const path = found.stdout.trim();
  return found.status === 0 && path !== '' ? path : undefined;
}

const CLOCK_TICKS_PER_SECOND = 100;

/** CPU seconds (user + system) the processes have used so far, from /proc; NaN where there is none. */
export function cpuSeconds(pids: readonly number[]): number {
  let total = 0;
  for (const pid of pids) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      // Fields after the command name (which may hold spaces) start at state: utime and stime are 12th and 13th.
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      total += (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS_PER_SECOND;
    } catch {
      return NaN;
    }
  }
  return total;
}

export interface WrkResult {
  requests: number;
  seconds: number;
  errors: number;
  /** Milliseconds. */
  p50: number;
  p90: number;
  p99: number;
}

/** The wrk script that POSTs one JSON body. */
export function writeWrkScript(dir: string, body: string): string {
  if (body.includes(']]')) throw new Error('the body must not contain ]] (a Lua long-string end)');
  const file = join(dir, 'post.lua');
  writeFileSync(file, `wrk.method = "POST"\nwrk.body = [[${body}]]\nwrk.headers["Content-Type"] = "application/json"\n`);
  return file;
}

/** Runs `wrk -t1 -cN -dS --latency -s script url` and reads its summary. */
export async function runWrk(wrk: string, script: string, url: string, connections: number, seconds: number): Promise<WrkResult> {
  const child = spawn(wrk, ['-t1', `-c${connections}`, `-d${seconds}s`, '--latency', '-s', script, url], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (out += chunk.toString()));
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
  if (code !== 0) throw new Error(`wrk exited with ${code}: ${out}`);
  return parseWrk(out);
}

function toMs(value: string, unit: string): number {
  const v = Number(value);
  switch (unit) {
    case 'us':
      return v / 1000;
    case 'ms':
      return v;
    case 's':
      return v * 1000;
    case 'm':
      return v * 60_000;
    default:
      return NaN;
  }
}

export function parseWrk(out: string): WrkResult {
  const total = /(\d+) requests in ([\d.]+)(us|ms|s|m)/.exec(out);
  if (!total) throw new Error(`cannot read wrk's output:\n${out}`);
  const pct = (p: number) => {
    const m = new RegExp(`^\\s+${p}%\\s+([\\d.]+)(us|ms|s|m)`, 'm').exec(out);
    return m ? toMs(m[1] as string, m[2] as string) : NaN;
  };
  const non2xx = /Non-2xx or 3xx responses: (\d+)/.exec(out);
  const socket = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(out);
  const socketErrors = socket ? socket.slice(1).reduce((s, n) => s + Number(n), 0) : 0;
  return {
    requests: Number(total[1]),
    seconds: toMs(total[2] as string, total[3] as string) / 1000,
    errors: (non2xx ? Number(non2xx[1]) : 0) + socketErrors,
    p50: pct(50),
    p90: pct(90),
    p99: pct(99),
  };
}

export interface Nginx {
  port: number;
  pid: number;
  stop(): Promise<void>;
}

/**
 * nginx as a plain keep-alive reverse proxy to `upstream`: one process (no master), no access
 * log, no buffering (an LLM proxy must stream), HTTP/1.1 keep-alive to the engine. The floor
 * any proxy can be measured against.
 */
export async function startNginx(nginx: string, port: number, upstream: string): Promise<Nginx> {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-bench-nginx-'));
  const upstreamHost = new URL(upstream).host;
  const conf = `
daemon off;
master_process off;
worker_processes 1;
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path ${dir}/body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
  upstream engine { server ${upstreamHost}; keepalive 256; }
  server {
    listen 127.0.0.1:${port};
    location / {
      proxy_pass http://engine;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
`;
  writeFileSync(join(dir, 'nginx.conf'), conf);
  const child: ChildProcess = spawn(nginx, ['-p', dir, '-e', join(dir, 'error.log'), '-c', join(dir, 'nginx.conf')], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let err = '';
  child.stderr?.on('data', (chunk: Buffer) => (err += chunk.toString()));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const deadline = Date.now() + 5000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`nginx exited: ${err}${safeRead(join(dir, 'error.log'))}`);
    try {
      const res = await fetch(`http://127.0.0.1:${port}/health`);
      await res.arrayBuffer();
      break;
    } catch {
      if (Date.now() > deadline) throw new Error(`nginx did not answer on ${port}: ${err}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  return {
    port,
    pid: child.pid as number,
    stop: async () => {
      child.kill('SIGTERM');
      await exited;
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

function safeRead(file: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return '';
  }
}
