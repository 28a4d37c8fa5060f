// A listening "attacker" endpoint for the signed-route tests: it answers any request as a chat
// completion would and counts them, so that a test can show it was sent none. Loopback only.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll } from 'vitest';

export interface Attacker {
  /** `http://127.0.0.1:PORT`, once the file's beforeAll ran. */
  url: string;
  /** Requests it has been sent. */
  hits: number;
}

/** Starts the attacker before the file's tests and closes it after them. */
export function useAttacker(): Attacker {
  const attacker: Attacker = { url: '', hits: 0 };
  let server: Server | undefined;
  beforeAll(async () => {
    server = createServer((_req, res) => {
      attacker.hits++;
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({ id: 'x', object: 'chat.completion', choices: [{ index: 0, message: { role: 'assistant', content: 'pwned' } }] }),
      );
    });
    await new Promise<void>((resolve) => server!.listen(0, '127.0.0.1', resolve));
    attacker.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    await new Promise((resolve) => server?.close(resolve));
  });
  return attacker;
}
