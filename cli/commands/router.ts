// `llmgw router`: the OpenAI-compatible router, with its flags (router/main.ts's RouterFlags).
// The router's code is loaded only when the command runs, so other commands start fast.
import type { Command } from 'commander';
import type { RouterFlags } from '../../router/main.js';

export function register(program: Command): void {
  program
    .command('router')
    .description('the OpenAI-compatible router: routes learned from Temporal, streaming pass-through, load-aware balancing, failover')
    .option('--port <port>', 'listen port', '8080')
    .option('--host <host>', 'listen address (anything but loopback needs API keys or --allow-unauthenticated)', '0.0.0.0')
    .option(
      '--api-keys-file <file>',
      'require one of these keys (one a line: `KEY rps=N concurrent=N`, or a JSON object that may also name the models and adapters the key can use; LLMGW_API_KEYS adds more); read again when it changes and on SIGHUP',
    )
    .option('--allow-unauthenticated', 'serve a non-loopback address without API keys (anyone who can reach it may use it)')
    .option('--key-rps <n>', 'requests per second per API key unless its line says otherwise (default unlimited)')
    .option(
      '--key-concurrency <n|off>',
      'requests in flight (held ones included) per API key unless its line says otherwise (off: unlimited)',
      '64',
    )
    .option(
      '--affinity <list>',
      'cache-aware routing: on (default), off, or per deployment NAME:on|off,... (default LLMGW_ROUTER_AFFINITY)',
    )
    .option(
      '--affinity-abs-gap <n>',
      'until an engine reports its concurrency: in-flight requests a replica may hold beyond the least-loaded one and still get its cached keys (then cost decides: docs/routing-policies.md)',
      '8',
    )
    .option(
      '--affinity-rel-gap <x>',
      '... and how many times the least-loaded one it may hold (both must be exceeded to move a request)',
      '1.5',
    )
    .option(
      '--kv-events <port>',
      "follow engines' KV-cache events: off, PORT, or +OFFSET from the engine's HTTP port (default LLMGW_ROUTER_KV_EVENTS)",
    )
    .option('--catalog <file>', 'catalog whose LoRA adapters this router loads on demand (default LLMGW_CATALOG; re-read on change)')
    .option('--static-routes <list>', 'serve name=http://host:port,... instead of asking Temporal')
    .option(
      '--routes <how>',
      'watch: long-poll the routes workflow (falls back to visibility while it is missing); visibility: list replicas every 0.5 s',
      'watch',
    )
    .option(
      '--route-hold <seconds>',
      'how long a route Temporal forgot (not withdrew) keeps serving while its engine answers health checks (0: never held)',
      '600',
    )
    .option('--body-limit <bytes>', 'largest request body', String(8 * 1024 * 1024))
    .option(
      '--held-bytes <bytes>',
      'request bodies held in memory at once (being read, waiting, in flight to engines); beyond: 503 with Retry-After',
      String(256 * 1024 * 1024),
    )
    .option(
      '--upstream-idle-timeout <seconds>',
      'how long an engine may send nothing (no headers yet, or between two pieces of an answer) before its request fails (0: never)',
      '600',
    )
    .option(
      '--admin-addr <unix|unix:PATH|host:port|off>',
      '/metrics and the detailed /health (engine URLs, route-source errors); unix (default) is a 0600 socket, $XDG_RUNTIME_DIR/llmgw/router-<port>.sock or ~/.llmgw/run/router-<port>.sock',
    )
    .option('--engine-key-file <file>', 'the API key engines require (as given to the agents): sent to engines, never to clients')
    .option(
      '--catalog-key <file>',
      "the control worker's public key file (or LLMGW_CATALOG_PUBLIC_KEY_FILE): only routes and deployments it signed are installed; without it (or --insecure-routes) a router reading Temporal does not start",
    )
    .option(
      '--insecure-routes',
      'with no --catalog-key: install routes unsigned (anyone who can signal the routes workflow moves traffic); said in the log and /health',
    )
    .option('--debug-headers', 'name the engine that answered in x-llmgw-endpoint (clients learn engine addresses: not for production)')
    .option('--shutdown-grace <seconds>', 'how long in-flight requests may finish on SIGTERM', '30')
    .option('--workers <n>', 'router processes sharing the port (each enforces 1/N of every key limit and queue size)', '1')
    .option(
      '--queue-size <n>',
      'requests held per deployment while it has no replica (scaled to zero, starting) or every replica is saturated; beyond: 429',
      '1000',
    )
    .option('--queue-timeout <seconds>', 'how long a held request may wait for a replica before it is answered 503', '300')
    .option(
      '--saturated-waiting <n|off>',
      'an engine with this many requests waiting is saturated: with every replica saturated, requests wait at the router (off: never)',
      '8',
    )
    .option(
      '--fairness <weighted|fifo>',
      'how held requests of one priority share a saturated deployment: by tenant weight, or first come first served',
      'weighted',
    )
    .option(
      '--kept-slots <fraction>',
      "while tenants or priorities contend, the share of each engine's slots kept for critical requests and tenants below their share (0: none)",
      '0.125',
    )
    .option(
      '--router-id <id>',
      'how the routes workflow knows this router (default HOST:PORT: a router restarted on its address takes over its entry)',
    )
    .option('--files-dir <dir>', 'serve the Files API (/v1/files, purpose batch) with files kept in this directory')
    .option(
      '--files-s3 <s3://bucket/prefix>',
      'serve the Files API with files kept in this bucket (credentials and endpoint from the environment, as for S3 weights)',
    )
    .option('--files-max-bytes <bytes>', 'the largest file /v1/files accepts', String(200 * 1024 * 1024))
    .option('--autoscale <on|off>', 'scale autoscaled deployments on load and wake them from zero (off: leave that to other routers)', 'on')
    .action(async (opts: RouterFlags) => {
      const { runRouter } = await import('../../router/main.js');
      await runRouter(opts);
    });
}
