// The streaming multipart/form-data reader behind uploads to /v1/files (batches/multipart.ts):
// the same parts whatever the chunking, bytes that look like a boundary kept as content, the
// boundary as clients write it, and malformed or oversized bodies refused by name.
import { PassThrough, Readable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { boundaryOf, MultipartError, readMultipart, type PartSink } from '../../batches/multipart.js';

/** Reads `body` cut in pieces of `size` bytes; the fields and the one file's name and bytes. */
async function parse(body: Buffer, boundary: string, size = body.length) {
  const chunks: Buffer[] = [];
  for (let at = 0; at < body.length; at += size) chunks.push(body.subarray(at, at + size));
  const fields: Record<string, string> = {};
  const received: Buffer[] = [];
  let filename: string | undefined;
  let ended: Promise<void> = Promise.resolve();
  const sink: PartSink = {
    field: (name, value) => (fields[name] = value),
    file: (_name, given) => {
      filename = given;
      const out = new PassThrough();
      out.on('data', (b: Buffer) => received.push(b));
      ended = new Promise((resolve) => out.once('end', resolve));
      return out;
    },
  };
  await readMultipart(Readable.from(chunks), boundary, sink, { headerBytes: 1024, fieldBytes: 1024, parts: 4 });
  await ended;
  return { fields, filename, file: Buffer.concat(received) };
}

const boundary = '----formdata-undici-0123456789';
const part = (headers: string, content: string | Buffer): Buffer =>
  Buffer.concat([Buffer.from(`--${boundary}\r\n${headers}\r\n\r\n`), Buffer.from(content), Buffer.from('\r\n')]);
const end = Buffer.from(`--${boundary}--\r\n`);

describe('the multipart reader', () => {
  it('reads the same fields and file bytes whatever the chunking, boundary look-alikes included', async () => {
    const content = Buffer.from(`{"a":1}\r\n--${boundary.slice(0, 10)}\r\n-- not a boundary\r\nx--${boundary}\r\n`.repeat(50));
    const body = Buffer.concat([
      part('Content-Disposition: form-data; name="file"; filename="in.jsonl"\r\nContent-Type: application/octet-stream', content),
      part('Content-Disposition: form-data; name="purpose"', 'batch'),
      end,
    ]);
    for (const size of [1, 2, 7, 45, 64, 1000, body.length]) {
      const read = await parse(body, boundary, size);
      expect(read.fields, `chunks of ${size}`).toEqual({ purpose: 'batch' });
      expect(read.filename).toBe('in.jsonl');
      expect(read.file.equals(content), `chunks of ${size}`).toBe(true);
    }
  });

  it('skips a preamble, and takes an empty file and quoted names with semicolons', async () => {
    const body = Buffer.concat([
      Buffer.from('ignored preamble\r\n'),
      part('content-disposition: form-data; name="purpose"', 'batch'),
      part('Content-Disposition: form-data; name="file"; filename="a;b \\"c\\".jsonl"', ''),
      end,
    ]);
    expect(await parse(body, boundary, 3)).toEqual({ fields: { purpose: 'batch' }, filename: 'a;b "c".jsonl', file: Buffer.alloc(0) });
  });

  it('finds the boundary in the Content-Type as clients write it, and nothing in other types', () => {
    expect(boundaryOf(`multipart/form-data; boundary=${boundary}`)).toBe(boundary);
    expect(boundaryOf('Multipart/Form-Data; charset=utf-8; boundary="a b:c"')).toBe('a b:c');
    expect(boundaryOf('application/json')).toBeUndefined();
    expect(boundaryOf('multipart/form-data')).toBeUndefined();
    expect(boundaryOf(`multipart/form-data; boundary=${'x'.repeat(71)}`)).toBeUndefined();
  });

  it('refuses, by name, a body cut short, a part without a name, too many parts and an oversized field', async () => {
    const field = part('Content-Disposition: form-data; name="purpose"', 'batch');
    await expect(parse(field, boundary)).rejects.toThrow(/ended before its closing boundary/);
    // Cut inside a file part: refused by name, its file stream destroyed, nothing left unhandled
    // (an unheard error there once ended the router).
    const cutFile = part('Content-Disposition: form-data; name="file"; filename="in.jsonl"', '{"a":1}\n').subarray(0, -2);
    await expect(parse(Buffer.concat([field, cutFile]), boundary, 5)).rejects.toThrow(/ended before its closing boundary/);
    await expect(parse(Buffer.concat([part('Content-Disposition: form-data', 'x'), end]), boundary)).rejects.toThrow(/no name/);
    await expect(parse(Buffer.concat([field, field, field, field, field, end]), boundary)).rejects.toThrow(/more than 4 parts/);
    const big = part('Content-Disposition: form-data; name="purpose"', 'x'.repeat(2000));
    await expect(parse(Buffer.concat([big, end]), boundary)).rejects.toThrow(MultipartError);
  });
});
