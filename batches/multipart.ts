// Reading multipart/form-data bodies (RFC 7578) for uploads to /v1/files, with busboy: small
// fields are collected, a file part's bytes are written on to a stream as they arrive, with the
// body's own backpressure, so a 200 MB upload never sits in memory (undici's and Node's
// `Request.formData()` read the whole body first). Router side.
import busboy from 'busboy';
import { Readable, type Writable } from 'node:stream';

/** A body that is not the multipart/form-data it claims to be, or is over one of its limits. */
export class MultipartError extends Error {
  override name = 'MultipartError';
}

/** What the reader hands each part to. */
export interface PartSink {
  /** A field without a filename, whole. */
  field(name: string, value: string): void;
  /** A file part begins: where its bytes go, or undefined to drop them. Ended when the part ends. */
  file(name: string, filename: string): Writable | undefined;
}

export interface MultipartLimits {
  /** Bytes of one part's headers. */
  headerBytes: number;
  /** Bytes of one non-file field. */
  fieldBytes: number;
  /** Parts in one body. */
  parts: number;
}

export const DEFAULT_MULTIPART_LIMITS: MultipartLimits = { headerBytes: 16 * 1024, fieldBytes: 64 * 1024, parts: 16 };

/** The boundary a Content-Type names, or undefined when it is not multipart/form-data with one. */
export function boundaryOf(contentType: string | undefined): string | undefined {
  if (contentType === undefined) return undefined;
  const [type = '', ...params] = contentType.split(';');
  if (type.trim().toLowerCase() !== 'multipart/form-data') return undefined;
  for (const param of params) {
    const eq = param.indexOf('=');
    if (eq < 0 || param.slice(0, eq).trim().toLowerCase() !== 'boundary') continue;
    let value = param.slice(eq + 1).trim();
    if (value.startsWith('"') && value.endsWith('"') && value.length >= 2) value = value.slice(1, -1);
    // RFC 2046: 1 to 70 characters.
    return value.length >= 1 && value.length <= 70 ? value : undefined;
  }
  return undefined;
}

/**
 * Reads the whole body, handing parts to `sink` as they come. Resolves once the body has been
 * read and every file stream handed out has taken its bytes; throws MultipartError on a
 * malformed body or one over `limits`, after destroying a file stream it had opened.
 */
export async function readMultipart(
  body: AsyncIterable<Buffer>,
  boundary: string,
  sink: PartSink,
  limits: MultipartLimits = DEFAULT_MULTIPART_LIMITS,
): Promise<void> {
  const parser = busboy({
    headers: { 'content-type': `multipart/form-data; boundary=${boundary}` },
    // One more than allowed, so that the one too many is seen (busboy drops parts past its limit silently).
    limits: { parts: limits.parts + 1, fieldSize: limits.fieldBytes, headerPairs: 32 },
  });
  const opened: Writable[] = [];
  const written: Array<Promise<void>> = [];
  let parts = 0;
  let failure: MultipartError | undefined;
  const fail = (why: string): void => {
    failure ??= new MultipartError(why);
    for (const out of opened) out.destroy(failure);
    // The rest of the body is read and dropped, not cut: the client is still to be answered.
    source.unpipe(parser);
    source.resume();
    parser.destroy();
  };
  const counted = (): boolean => {
    if (++parts <= limits.parts) return true;
    fail(`more than ${limits.parts} parts`);
    return false;
  };
  parser.on('field', (name, value, info) => {
    if (!counted()) return;
    if (name === undefined || name === '') return fail('a part has no name');
    if (info.valueTruncated) return fail(`the field ${name} passes ${limits.fieldBytes} bytes`);
    sink.field(name, value);
  });
  parser.on('file', (name, stream, info) => {
    // A body cut inside a file part errors its stream as well as the parser: heard here, judged there.
    stream.on('error', () => undefined);
    if (!counted()) return void stream.resume();
    if (name === undefined || name === '') return fail('a part has no name');
    const out = sink.file(name, info.filename ?? '');
    if (out === undefined) return void stream.resume();
    opened.push(out);
    const finished = new Promise<void>((resolve, reject) => {
      out.once('finish', resolve);
      out.once('error', reject);
    });
    // Awaited only when the body was whole; a failed body's streams are destroyed and not awaited.
    finished.catch(() => undefined);
    written.push(finished);
    stream.pipe(out);
  });
  // A request is read as it is, so that a client that leaves is seen as its stream closing early.
  const source = body instanceof Readable ? body : Readable.from(body, { objectMode: false });
  const done = new Promise<void>((resolve, reject) => {
    parser.once('close', resolve);
    // `on`, not `once`: busboy may emit more than one error for one body, and one unheard would end the process.
    parser.on('error', (err: Error) => {
      fail(err.message === 'Unexpected end of form' ? 'the body ended before its closing boundary' : err.message.toLowerCase());
      reject(failure as MultipartError);
    });
    const cut = (err: Error): void => {
      for (const out of opened) out.destroy(err);
      parser.destroy();
      reject(failure ?? err);
    };
    source.once('error', cut);
    source.once('close', () => {
      if (!source.readableEnded) cut(new Error('the body was cut off before its end'));
    });
  });
  source.pipe(parser);
  try {
    await done;
  } catch (err) {
    if (failure !== undefined) throw failure;
    throw err;
  }
  if (failure !== undefined) throw failure;
  await Promise.all(written);
}
