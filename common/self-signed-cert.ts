// A self-signed P-256 certificate for one engine's advertised address, built with Node's crypto
// and a few lines of DER: no dependency here makes certificates (X509Certificate only reads them),
// and spawning `openssl` per engine start would tie the agent to a CLI's flags and output. Nobody
// is asked to trust it as a CA: routers pin its SHA-256 fingerprint (common/engine-tls.ts), which
// the agent's endpoint attestation carries. Agent side (tests make them too).
import { createHash, generateKeyPairSync, randomBytes, sign } from 'node:crypto';
import { isIP } from 'node:net';

export interface EngineCertificate {
  /** PEM, public: what the engine presents. */
  certPem: string;
  /** PKCS#8 PEM: the engine's alone (written 0600 for its uid). */
  keyPem: string;
  /** SHA-256 of the certificate's DER, lowercase hex: what routers pin. */
  fingerprint: string;
}

/** The certificate's life: long, since routers pin it and check no dates; a new start makes a new one. */
const VALID_DAYS = 3650;

function length(n: number): Buffer {
  if (n < 0x80) return Buffer.from([n]);
  const bytes: number[] = [];
  for (let rest = n; rest > 0; rest >>= 8) bytes.unshift(rest & 0xff);
  return Buffer.from([0x80 | bytes.length, ...bytes]);
}

function tlv(tag: number, ...content: Buffer[]): Buffer {
  const body = Buffer.concat(content);
  return Buffer.concat([Buffer.from([tag]), length(body.length), body]);
}

const sequence = (...items: Buffer[]) => tlv(0x30, ...items);

function oid(dotted: string): Buffer {
  const [a, b, ...rest] = dotted.split('.').map(Number) as [number, number, ...number[]];
  const bytes = [40 * a + b];
  for (const arc of rest) {
    const base128 = [arc & 0x7f];
    for (let v = arc >> 7; v > 0; v >>= 7) base128.unshift(0x80 | (v & 0x7f));
    bytes.push(...base128);
  }
  return tlv(0x06, Buffer.from(bytes));
}

/**
 * A non-negative INTEGER from big-endian bytes, in DER's one encoding: no leading zero bytes
 * (OpenSSL refuses them as "illegal padding"), one added where the top bit is set.
 */
export function derInteger(bytes: Buffer): Buffer {
  let start = 0;
  while (start < bytes.length - 1 && bytes[start] === 0) start++;
  const minimal = bytes.subarray(start);
  return tlv(0x02, minimal[0]! & 0x80 ? Buffer.concat([Buffer.from([0]), minimal]) : minimal);
}

/** UTCTime before 2050, GeneralizedTime after (RFC 5280 4.1.2.5). */
function time(date: Date): Buffer {
  const iso = date.toISOString().replace(/[-:T]/g, '').slice(0, 14);
  return date.getUTCFullYear() < 2050 ? tlv(0x17, Buffer.from(`${iso.slice(2)}Z`)) : tlv(0x18, Buffer.from(`${iso}Z`));
}

const commonName = (cn: string) => sequence(tlv(0x31, sequence(oid('2.5.4.3'), tlv(0x0c, Buffer.from(cn, 'utf8')))));

function extension(id: string, critical: boolean, value: Buffer): Buffer {
  return sequence(oid(id), ...(critical ? [tlv(0x01, Buffer.from([0xff]))] : []), tlv(0x04, value));
}

/** The address as a subjectAltName: an iPAddress for an IP (v4 or v6), a dNSName otherwise. */
function altName(address: string): Buffer {
  const bare = address.replace(/^\[|\]$/g, '');
  switch (isIP(bare)) {
    case 4:
      return tlv(0x87, Buffer.from(bare.split('.').map(Number)));
    case 6:
      return tlv(0x87, ipv6Bytes(bare));
    default:
      return tlv(0x82, Buffer.from(bare, 'ascii'));
  }
}

function ipv6Bytes(address: string): Buffer {
  const [head = '', tail] = address.split('::') as [string, string | undefined];
  const groups = (part: string) => (part === '' ? [] : part.split(':'));
  const left = groups(head);
  const right = tail === undefined ? [] : groups(tail);
  const all = [...left, ...Array<string>(8 - left.length - right.length).fill('0'), ...right];
  const out = Buffer.alloc(16);
  all.forEach((group, i) => out.writeUInt16BE(parseInt(group, 16), i * 2));
  return out;
}

/** DER to PEM under `label`. */
function pem(label: string, der: Buffer): string {
  const lines = der.toString('base64').match(/.{1,64}/g) ?? [];
  return `-----BEGIN ${label}-----\n${lines.join('\n')}\n-----END ${label}-----\n`;
}

/**
 * A new key pair and a self-signed certificate naming `address` (the agent's --advertise-addr) as
 * its subjectAltName, for a server (serverAuth), valid from a minute ago (clocks differ).
 */
export function issueEngineCertificate(address: string, now = new Date()): EngineCertificate {
  const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  const ecdsaWithSha256 = sequence(oid('1.2.840.10045.4.3.2'));
  const name = commonName('llmgw engine');
  const serial = randomBytes(16);
  serial[0] = serial[0]! & 0x7f;
  const tbs = sequence(
    tlv(0xa0, derInteger(Buffer.from([2]))),
    derInteger(serial),
    ecdsaWithSha256,
    name,
    sequence(time(new Date(now.getTime() - 60_000)), time(new Date(now.getTime() + VALID_DAYS * 86_400_000))),
    name,
    publicKey.export({ type: 'spki', format: 'der' }),
    tlv(
      0xa3,
      sequence(
        extension('2.5.29.19', true, sequence()),
        // digitalSignature only: an ECDHE handshake signs, it never encrypts to the key.
        extension('2.5.29.15', true, tlv(0x03, Buffer.from([0x07, 0x80]))),
        extension('2.5.29.37', false, sequence(oid('1.3.6.1.5.5.7.3.1'))),
        extension('2.5.29.17', false, sequence(altName(address))),
      ),
    ),
  );
  const signature = sign('sha256', tbs, privateKey);
  const der = sequence(tbs, ecdsaWithSha256, tlv(0x03, Buffer.from([0]), signature));
  return {
    certPem: pem('CERTIFICATE', der),
    keyPem: privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
    fingerprint: createHash('sha256').update(der).digest('hex'),
  };
}
