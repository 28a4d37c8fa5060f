// Starting a shard: idempotent by shard id, the spec recorded before any spawn, ports chosen,
// each process launched in its own group with its output in the shard's log. Agent side.
// The part of a Ray launch that waits for the cluster is in start-ray.ts.
import { clone } from '@bufbuild/protobuf';
import { ApplicationFailure } from '@temporalio/common';
import { FailureType } from '../../../common/failures.js';
import { isSafeShardId } from '../../../common/names.js';
import { ShardState, StartShardSchema, type RunningShard, type StartShard } from '../../../proto/gen/llmgw/v1/shard_pb.js';
import { buildEngineLaunch, type EngineLaunch, type ProcessSpec } from '../../engines/index.js';
import { hostEnvironment, resolveHostReferences, type HostEnvSource } from '../../engines/host-variables.js';
import { errorText, type SupervisorCore } from '../core.js';
import { appendLogLine } from '../logs/logs.js';
import { PORT_MARKER_ENV, RAY_PORTS_MARKER_ENV } from '../processes/markers.js';
import { choosePort, chooseRendezvousPort, rayContext, releaseSpan, rendezvousPorts } from './ports.js';
import { sameProcess } from '../processes/process-table.js';
import { exitDetails, type Shard, type ShardProcess } from '../shard.js';
import { specDifferences } from './spec-diff.js';
import { checkStateDirWritable, recordPath, writeRecordAtomic, type ShardRecord } from '../spec-store.js';
import { checkPlacement } from './start-checks.js';
import { readEngineKey } from '../../engine-identity.js';
import { engineKeyDelivery, shardEngineKey, writeEngineConfig } from './engine-key.js';
import { engineTlsFiles, shardCertificate } from './engine-tls.js';
import { chooseEngineUid, prepareEngineHome, shardUser } from './engine-uid.js';
import { guardRendezvous } from './rendezvous.js';
import { startAfterRay } from './start-ray.js';
import { stopTargets } from '../stop/stop.js';
import { terminate } from '../stop/terminate.js';
import { clearTimer, markExited, onProcessExit, watch } from '../watch/watch.js';

// Engines get a clean environment: the agent's own (its Temporal credentials, its LLMGW_*
// markers if someone set them) is none of their business.
const BASE_ENV = ['PATH', 'HOME', 'LANG', 'LC_ALL', 'TMPDIR', 'USER', 'TZ'];

/**
 * Starts one shard, idempotently: the same shard id with an equal spec while its processes
 * live returns the running shard and starts nothing. Returns once the processes are spawned
 * (Starting or Loading); waitHealthy says when the engine serves.
 */
export async function start(core: SupervisorCore, requested: StartShard): Promise<RunningShard> {
  core.assertOpen();
  const id = requested.shardId;
  if (!isSafeShardId(id)) {
    throw ApplicationFailure.nonRetryable(
      `shard id ${JSON.stringify(id)} cannot name a spec file: use letters, digits, '.', '_' and '-', starting with a letter or digit`,
      FailureType.InvalidSpec,
    );
  }
  const spec = clone(StartShardSchema, requested);
  if (spec.nodeId === '') spec.nodeId = core.nodeId;
  if (spec.nodeId !== core.nodeId) {
    // The engine would carry another node's marker: that agent would kill it as a stranger.
    throw ApplicationFailure.nonRetryable(
      `shard ${id} is meant for node ${spec.nodeId}, but this agent is node ${core.nodeId}`,
      FailureType.InvalidSpec,
    );
  }
  // Before anything is written or spawned: only revisions the catalog allows run here.
  // A shard recorded here (an engine started before, or adopted) is no new engine: its restart
  // may carry a ticket of hours ago; a new one needs a fresh ticket.
  await core.options.checkRevision?.(spec, { newStart: !core.shards.has(id) });
  await core.options.checkPinnedFiles?.(spec);
  return core.locks.run(id, () => startLocked(core, spec));
}

async function startLocked(core: SupervisorCore, spec: StartShard): Promise<RunningShard> {
  core.assertOpen();
  const id = spec.shardId;
  const existing = core.shards.get(id);
  if (existing) {
    const differences = specDifferences(existing.spec, existing.record.httpPort, spec);
    if (differences.length > 0) {
      throw ApplicationFailure.nonRetryable(
        `shard ${id} was already started with a different spec (${differences.join(', ')} differ); a changed spec needs a new shard id`,
        FailureType.SpecConflict,
        { shardId: id, differences },
      );
    }
    if (isRunning(core, existing)) return core.running(existing);
    await clearRemnants(core, existing);
  }

  // Before any spec or port: the placement must be one this host can honour. Its GPUs stay
  // reserved until the shard is in core.shards, where the next check sees them.
  const releaseGpus = checkPlacement(core, spec, existing);
  try {
    return await startChecked(core, spec, existing);
  } finally {
    releaseGpus();
  }
}

async function startChecked(core: SupervisorCore, spec: StartShard, existing: Shard | undefined): Promise<RunningShard> {
  const { stateDir, advertiseAddress } = core.options;
  const id = spec.shardId;
  checkStateDirWritable(stateDir);
  // A reference to a host variable this agent was not given fails now, before any spec or port.
  resolveHostReferences(spec, hostSource(core));
  const port = await choosePort(core, spec, existing);
  if (spec.rank === 0 && spec.nnodes > 1 && spec.leaderPort === 0) {
    // Rank 0's host chooses the rendezvous port; the replica hands it to the other ranks.
    spec.leaderPort = await chooseRendezvousPort(core, spec, existing, port);
    if (spec.leaderAddress === '') spec.leaderAddress = advertiseAddress;
  }
  let launch: EngineLaunch;
  let shard: Shard;
  let rayPorts: { from: number; to: number } | undefined;
  // --engine-tls: the files' paths are fixed by the shard id, so the launch can name them now.
  const tls = core.options.engineTls ? engineTlsFiles(stateDir, id) : undefined;
  try {
    const ray = await rayContext(core, spec, existing);
    rayPorts = ray.rayPorts;
    launch = buildEngineLaunch(spec, {
      ...core.options.engineContext,
      ...ray,
      advertiseAddress,
      httpPort: port,
      ...(tls ? { tls } : {}),
    });
    for (const p of launch.processes) {
      if (!p.blocking) {
        throw ApplicationFailure.nonRetryable(
          `shard ${id}: the launch has a one-shot ${p.role} step, which this agent does not support`,
          FailureType.InvalidSpec,
        );
      }
    }
    const record: ShardRecord = {
      version: 1,
      spec,
      httpPort: port,
      launch: { roles: launch.processes.map((p) => p.role), servesHttp: launch.servesHttp, healthPath: launch.healthPath },
      processes: [],
      startedAt: new Date().toISOString(),
    };
    if (rayPorts) record.rayPorts = rayPorts;
    // Chosen with no await before core.shards.set below, so no other start can take it too.
    const uid = chooseEngineUid(core, existing);
    if (uid !== undefined) {
      record.uid = uid;
      const user = shardUser(core, uid);
      if (user) prepareEngineHome(stateDir, user, existing?.record.uid === undefined);
    }
    if (tls && launch.servesHttp) {
      const user = shardUser(core, record.uid);
      record.tlsFingerprint = shardCertificate(stateDir, id, advertiseAddress, user, existing?.record.tlsFingerprint).fingerprint;
    }
    // Before any spawn: an agent that dies right after spawning must find the spec.
    writeRecordAtomic(stateDir, record);
    shard = core.newShard(record);
    core.shards.set(id, shard);
  } finally {
    core.reservedPorts.delete(port);
    releaseSpan(core, rendezvousPorts(spec));
    releaseSpan(core, rayPorts);
  }

  // What must wait for a Ray cluster (rank 0's engine) starts in the background: the other
  // ranks, whose Ray workers complete the cluster, are started only once this start returns.
  const waitAt = launch.processes.findIndex((p) => p.waitForRayNodes !== undefined);
  const now = waitAt < 0 ? launch.processes : launch.processes.slice(0, waitAt);
  const later = waitAt < 0 ? [] : launch.processes.slice(waitAt);
  try {
    // Before anything listens: its rendezvous and Ray ports are open to the placement's peers only.
    await guardRendezvous(core, shard);
    for (const p of now) {
      throwIfStartCut(shard);
      await core.options.beforeSpawn?.({ shardId: id, recordFile: recordPath(stateDir, id), process: p });
      throwIfStartCut(shard);
      await spawnProcess(core, shard, p);
    }
    throwIfStartCut(shard);
    await core.options.afterSpawn?.({ shardId: id });
  } catch (err) {
    if (!shard.exited && !shard.stopping) {
      markExited(core, shard, { message: `start failed: ${errorText(err)}` });
    }
    throw err;
  }

  shard.state = later.length === 0 && launch.servesHttp ? ShardState.LOADING : ShardState.STARTING;
  shard.runningSince = Date.now();
  if (later.length)
    shard.message = `waiting for ${later[0]!.waitForRayNodes} Ray node(s) before starting the ${later.map((p) => p.role).join(', ')}`;
  core.log(
    `started shard ${id}: ${shard.procs.map((p) => `${p.role} pid ${p.pid}`).join(', ')}${port ? ` on port ${port}` : ''}${later.length ? `; ${shard.message}` : ''}`,
  );
  core.count({ kind: 'start', restart: existing !== undefined });
  core.emitChange(id);
  watch(core, shard);
  if (later.length) void startAfterRay(core, shard, later, launch.servesHttp);
  return core.running(shard);
}

export function throwIfStartCut(shard: Shard): void {
  if (shard.startAbort.signal.aborted) {
    throw ApplicationFailure.retryable(`shard ${shard.spec.shardId}: start abandoned: ${errorText(shard.startAbort.signal.reason)}`);
  }
  if (shard.exited) {
    throw ApplicationFailure.nonRetryable(`shard ${shard.spec.shardId}: ${shard.message}`, FailureType.EngineExited, exitDetails(shard));
  }
}

export async function spawnProcess(core: SupervisorCore, shard: Shard, p: ProcessSpec): Promise<void> {
  const id = shard.spec.shardId;
  if (p.argv[0] === undefined)
    throw ApplicationFailure.nonRetryable(`shard ${id}: the ${p.role} has an empty command`, FailureType.InvalidSpec);
  const env = processEnv(core, shard.spec, p, shard.record);
  appendLogLine(
    shard.logFile,
    `--- llmgw agent ${core.nodeId} starting the ${p.role} of shard ${id} at ${new Date().toISOString()}: ${p.argv.join(' ')} ---`,
  );
  let launched;
  try {
    // The key is added only here: not in the spec record, the log line above or any report.
    const keyed = withEngineKey(core, shard, p, env);
    const user = shardUser(core, shard.record.uid);
    launched = await core.launcher.launch({
      role: p.role,
      argv: keyed.argv,
      env: keyed.env,
      logFile: shard.logFile,
      ...(user ? { user: { uid: user.uid, gid: user.gid } } : {}),
    });
  } catch (err) {
    throw ApplicationFailure.nonRetryable(`shard ${id}: ${errorText(err)}`, FailureType.EngineExited);
  }
  const proc: ShardProcess = { role: p.role, pid: launched.pid, startTicks: launched.startTicks, pgid: launched.pgid };
  proc.exited = launched.exited.then((exit) => {
    proc.exit = exit;
    onProcessExit(core, shard, proc);
  });
  shard.procs.push(proc);
  shard.record.processes.push({ role: proc.role, pid: proc.pid, startTicks: proc.startTicks, pgid: proc.pgid });
  writeRecordAtomic(core.options.stateDir, shard.record);
}

/**
 * The engine process with its replica run's API key (derived from --engine-key-file's: in its
 * environment, or in a config file for SGLang; engine-key.ts) and, run as another user, that user's HOME and USER (with
 * --engine-uid-range, the shard's own uid and HOME: engine-uid.ts).
 */
function withEngineKey(
  core: SupervisorCore,
  shard: Shard,
  p: ProcessSpec,
  env: Record<string, string>,
): { argv: string[]; env: Record<string, string> } {
  const { spec } = shard;
  const user = shardUser(core, shard.record.uid);
  const base = user ? { ...env, HOME: user.home, USER: user.name } : env;
  if (core.options.engineKeyFile === undefined || p.role !== 'engine') return { argv: p.argv, env: base };
  const key = engineKeyDelivery(spec.profile?.engine, shardEngineKey(spec, readEngineKey(core.options.engineKeyFile)));
  if (key.kind === 'env') return { argv: p.argv, env: { ...base, ...key.env } };
  const file = writeEngineConfig(core.options.stateDir, spec.shardId, key.yaml, user);
  return { argv: [...p.argv, '--config', file], env: base };
}

function hostSource(core: SupervisorCore): HostEnvSource {
  return { passEnv: core.options.passEnv, ...(core.options.envFile ? { envFile: core.options.envFile } : {}) };
}

/**
 * A few basics of the agent's own environment, the --pass-env variables, the values of the
 * profile's host references, then the shard's own variables, which win (markers, GPUs).
 */
function processEnv(core: SupervisorCore, spec: StartShard, p: ProcessSpec, record: ShardRecord): Record<string, string> {
  const port = record.httpPort;
  const env: Record<string, string> = {};
  for (const name of BASE_ENV) {
    const value = process.env[name];
    if (value !== undefined) env[name] = value;
  }
  const source = hostSource(core);
  Object.assign(env, hostEnvironment({ passEnv: source.passEnv }).passed);
  Object.assign(env, resolveHostReferences(spec, source));
  Object.assign(env, p.env);
  if (port > 0) env[PORT_MARKER_ENV] = String(port);
  if (record.rayPorts) env[RAY_PORTS_MARKER_ENV] = `${record.rayPorts.from}-${record.rayPorts.to}`;
  return env;
}

function isRunning(core: SupervisorCore, shard: Shard): boolean {
  if (shard.exited || shard.procs.length === 0 || shard.procs.length < shard.record.launch.roles.length) return false;
  return shard.procs.every((p) => p.exit === undefined && sameProcess(core.launcher, p.pid, p.startTicks));
}

/** Before a dead shard is started again: whatever its engine forked must not hold the GPUs. */
async function clearRemnants(core: SupervisorCore, shard: Shard): Promise<void> {
  shard.stopping = true;
  clearTimer(shard);
  const targets = stopTargets(core, shard);
  if (targets.length === 0) return;
  core.log(`shard ${shard.spec.shardId}: ending what is left of its previous start before starting it again`);
  const { survivors } = await terminate(core.launcher, targets, 0);
  if (survivors.length > 0) {
    throw ApplicationFailure.retryable(
      `shard ${shard.spec.shardId}: pid(s) ${survivors.map((t) => t.pid).join(', ')} of its previous start survive SIGKILL`,
    );
  }
}
