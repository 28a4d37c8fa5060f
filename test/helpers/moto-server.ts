// A real S3-speaking server for tests: moto's server mode (`moto[server]`, in the venv the
// test setup installs, test/setup/tools.ts) on a random loopback port, with IAM authentication on, so
// that a wrong or unauthorised key is refused as a real store refuses it. Ended by its pid.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createServer } from 'node:net';
import { toolProgram } from '../setup/tools.js';
import { pythonJson } from './python-json.js';

const MOTO_SERVER = toolProgram('moto', 'moto_server');
const PYTHON = toolProgram('moto', 'python');

/** Why moto cannot run here, or undefined: the test setup installs it, so a caller fails rather than skips. */
export function motoMissing(): string | undefined {
  return existsSync(MOTO_SERVER)
    ? undefined
    : `${MOTO_SERVER} is missing: npm test installs it in its global setup (test/setup/install-tools.ts)`;
}

export interface S3Key {
  AWS_ACCESS_KEY_ID: string;
  AWS_SECRET_ACCESS_KEY: string;
}

export interface MotoServer {
  endpoint: string;
  /** The environment of a host that reaches this store with `key`. */
  env(key: S3Key): Record<string, string>;
  /** A key allowed everything but the buckets named in `start({ deniedBuckets })`. */
  admin: S3Key;
  /** Runs Python with boto3 against the store as `admin`: `s3` is its client. Last stdout line parsed as JSON. */
  python<T>(code: string): Promise<T>;
  /** GetObject requests served so far for keys under `bucket/prefix` (from the server's request log). */
  gets(bucket: string, prefix: string): number;
  stop(): Promise<void>;
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port'))));
    });
  });
}

// The first three requests (the admin user, its key and its policy) are the only ones moto
// serves without a signature it can check against its IAM; every later one is authenticated.
const BOOTSTRAP = `
import boto3, json, os, sys
ep = os.environ['ENDPOINT']
anon = dict(endpoint_url=ep, region_name='us-east-1', aws_access_key_id='bootstrap', aws_secret_access_key='bootstrap')
iam = boto3.client('iam', **anon)
iam.create_user(UserName='admin')
key = iam.create_access_key(UserName='admin')['AccessKey']
denied = json.loads(os.environ['DENIED'])
statements = [{'Effect': 'Allow', 'Action': '*', 'Resource': '*'}]
if denied:
    statements.append({'Effect': 'Deny', 'Action': 's3:*', 'Resource': [f'arn:aws:s3:::{b}' for b in denied] + [f'arn:aws:s3:::{b}/*' for b in denied]})
iam.put_user_policy(UserName='admin', PolicyName='all', PolicyDocument=json.dumps({'Version': '2012-10-17', 'Statement': statements}))
print(json.dumps({'AWS_ACCESS_KEY_ID': key['AccessKeyId'], 'AWS_SECRET_ACCESS_KEY': key['SecretAccessKey']}))
`;

const runPython = <T>(code: string, env: Record<string, string>): Promise<T> => pythonJson<T>(PYTHON, code, env);

export async function startMotoServer(options: { deniedBuckets?: string[] } = {}): Promise<MotoServer> {
  const missing = motoMissing();
  if (missing) throw new Error(missing);
  const port = await freePort();
  const endpoint = `http://127.0.0.1:${port}`;
  const child: ChildProcess = spawn(MOTO_SERVER, ['-H', '127.0.0.1', '-p', String(port)], {
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/tmp', INITIAL_NO_AUTH_ACTION_COUNT: '3' },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  let log = '';
  child.stdout?.on('data', (chunk: Buffer) => (log += chunk.toString()));
  child.stderr?.on('data', (chunk: Buffer) => (log += chunk.toString()));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const stop = async (): Promise<void> => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    process.kill(-child.pid!, 'SIGTERM');
    const timer = setTimeout(() => child.exitCode === null && process.kill(-child.pid!, 'SIGKILL'), 5_000);
    await exited;
    clearTimeout(timer);
  };
  try {
    for (let i = 0; ; i++) {
      if (/Running on/.test(log)) break;
      if (child.exitCode !== null || i >= 300) throw new Error(`moto_server did not start on ${endpoint}:\n${log.slice(-3000)}`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    const admin = await runPython<S3Key>(BOOTSTRAP, { ENDPOINT: endpoint, DENIED: JSON.stringify(options.deniedBuckets ?? []) });
    const env = (key: S3Key): Record<string, string> => ({ AWS_ENDPOINT_URL_S3: endpoint, AWS_REGION: 'us-east-1', ...key });
    return {
      endpoint,
      admin,
      env,
      python: <T>(code: string) =>
        runPython<T>(
          `import boto3, json, os\ns3 = boto3.client('s3', endpoint_url=os.environ['AWS_ENDPOINT_URL_S3'], region_name='us-east-1')\n${code}`,
          env(admin),
        ),
      gets: (bucket, prefix) => log.split('\n').filter((line) => line.includes(`"GET /${bucket}/${prefix}`)).length,
      stop,
    };
  } catch (error) {
    await stop();
    throw error;
  }
}
