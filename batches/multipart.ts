// A streaming reader of multipart/form-data bodies (RFC 7578), for uploads to /v1/files: small
// fields are collected, a file part's bytes are written on to a stream as they arrive, with the
// body's own backpressure, so a 200 MB upload never sits in memory. Router side.
//
// Written here rather than taken from a library because none that streams is a dependency:
// undici's (and Node's) `Request.formData()` read the whole body into memory first, which is
// what an upload of a batch's input must not do.
import type { Writable } from 'node:stream';

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

const CRLF = Buffer.from('\r\n');
const HEADERS_END = Buffer.from('\r\n\r\n');

type Phase = 'preamble' | 'after-delimiter' | 'headers' | 'body' | 'done';

/** The part being read: a field's bytes so far, or the stream a file's bytes go to. */
interface Part {
  name: string;
  filename: string | undefined;
  fieldChunks: Buffer[];
  fieldBytes: number;
  sink: Writable | undefined;
}

/**
 * Reads the whole body, handing parts to `sink` as they come. Resolves once the closing
 * delimiter has been read (what follows it is read and dropped); throws MultipartError on a
 * malformed body or one over `limits`, after destroying a file stream it had opened.
 */
export async function readMultipart(
  body: AsyncIterable<Buffer>,
  boundary: string,
  sink: PartSink,
  limits: MultipartLimits = DEFAULT_MULTIPART_LIMITS,
): Promise<void> {
  // Every delimiter, the first included, is CRLF "--" boundary once a CRLF is put in front.
  const delimiter = Buffer.from(`\r\n--${boundary}`);
  let pending: Buffer = CRLF;
  let phase: Phase = 'preamble';
  let part: Part | undefined;
  let parts = 0;
  try {
    for await (const chunk of body) {
      if (phase === 'done') continue;
      pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk]);
      for (;;) {
        if (phase === 'preamble') {
          const at = pending.indexOf(delimiter);
          if (at < 0) {
            pending = pending.subarray(Math.max(0, pending.length - delimiter.length + 1));
            break;
          }
          pending = pending.subarray(at + delimiter.length);
          phase = 'after-delimiter';
        } else if (phase === 'after-delimiter') {
          if (pending.length < 2) break;
          if (pending[0] === 0x2d && pending[1] === 0x2d) {
            phase = 'done';
            break;
          }
          // Transport padding (spaces, tabs) may follow a delimiter before its CRLF.
          const eol = pending.indexOf(CRLF);
          if (eol < 0) {
            if (pending.length > 256) throw new MultipartError('a boundary line is not followed by CRLF');
            break;
          }
          if (!/^[ \t]*$/.test(pending.subarray(0, eol).toString('latin1')))
            throw new MultipartError('a boundary line is followed by other text');
          pending = pending.subarray(eol + 2);
          if (++parts > limits.parts) throw new MultipartError(`more than ${limits.parts} parts`);
          phase = 'headers';
        } else if (phase === 'headers') {
          const end = pending.indexOf(HEADERS_END);
          // A part with no headers at all starts its body at once.
          const bare = pending.length >= 2 && pending[0] === 0x0d && pending[1] === 0x0a;
          if (end < 0 && !bare) {
            if (pending.length > limits.headerBytes) throw new MultipartError(`a part's headers pass ${limits.headerBytes} bytes`);
            break;
          }
          const headerText = bare ? '' : pending.subarray(0, end).toString('utf8');
          pending = pending.subarray(bare ? 2 : end + 4);
          part = openPart(headerText, sink);
          phase = 'body';
        } else if (phase === 'body') {
          const current = part as Part;
          const at = pending.indexOf(delimiter);
          // Bytes that may be the start of a delimiter split across chunks stay pending.
          const safe = at >= 0 ? at : Math.max(0, pending.length - delimiter.length + 1);
          if (safe > 0) await take(current, pending.subarray(0, safe), limits);
          pending = pending.subarray(safe);
          if (at < 0) break;
          pending = pending.subarray(delimiter.length);
          closePart(current, sink);
          part = undefined;
          phase = 'after-delimiter';
        } else {
          break;
        }
      }
      // A view into the chunk would pin all of it; the pending tail is small, so copy it.
      if (pending.length > 0 && pending.length < chunk.length) pending = Buffer.from(pending);
    }
  } catch (err) {
    part?.sink?.destroy();
    throw err;
  }
  if (phase !== 'done') {
    part?.sink?.destroy();
    throw new MultipartError('the body ended before its closing boundary');
  }
}

function openPart(headerText: string, sink: PartSink): Part {
  let disposition: string | undefined;
  for (const line of headerText.split('\r\n')) {
    const colon = line.indexOf(':');
    if (colon > 0 && line.slice(0, colon).trim().toLowerCase() === 'content-disposition') disposition = line.slice(colon + 1);
  }
  if (disposition === undefined) throw new MultipartError('a part has no Content-Disposition header');
  const name = dispositionParam(disposition, 'name');
  if (name === undefined) throw new MultipartError('a part has no name');
  const filename = dispositionParam(disposition, 'filename');
  const part: Part = { name, filename, fieldChunks: [], fieldBytes: 0, sink: undefined };
  if (filename !== undefined) part.sink = sink.file(name, filename);
  return part;
}

/** One parameter of a Content-Disposition value (`form-data; name="file"; filename="in.jsonl"`). */
function dispositionParam(value: string, wanted: string): string | undefined {
  // Quoted strings may hold `;`, so match parameters rather than split on it.
  const re = /;\s*([\w*-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^;\s]*))/g;
  for (let m = re.exec(value); m !== null; m = re.exec(value)) {
    if ((m[1] ?? '').toLowerCase() !== wanted) continue;
    return m[2] !== undefined ? m[2].replace(/\\(.)/g, '$1') : (m[3] ?? '');
  }
  return undefined;
}

async function take(part: Part, bytes: Buffer, limits: MultipartLimits): Promise<void> {
  if (part.filename === undefined) {
    part.fieldBytes += bytes.length;
    if (part.fieldBytes > limits.fieldBytes) throw new MultipartError(`the field ${part.name} passes ${limits.fieldBytes} bytes`);
    part.fieldChunks.push(Buffer.from(bytes));
    return;
  }
  const out = part.sink;
  // A sink that stopped (its reader refused the file: too large) takes nothing more.
  if (out === undefined || out.destroyed || out.writableEnded) return;
  if (out.write(bytes)) return;
  await new Promise<void>((resolve) => {
    const done = (): void => {
      out.off('drain', done);
      out.off('close', done);
      resolve();
    };
    out.on('drain', done);
    out.on('close', done);
  });
}

function closePart(part: Part, sink: PartSink): void {
  if (part.filename === undefined) {
    sink.field(part.name, Buffer.concat(part.fieldChunks).toString('utf8'));
    return;
  }
  if (part.sink !== undefined && !part.sink.destroyed) part.sink.end();
}
