// One uid per shard (--engine-uid-range): engines of different tenants on one host cannot read
// each other's /proc/PID/environ (their keys, HF tokens) or files, as they can when all run as
// the one engine user. The group stays the engine user's, so a group-readable weights cache
// still serves every engine. Agent side.
import { chmodSync, chownSync, lstatSync, mkdirSync, rmSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { ApplicationFailure } from '@temporalio/common';
import { FailureType } from '../../../common/failures.js';
import type { EngineUser } from '../../engine-identity.js';
import type { SupervisorCore } from '../core.js';
import type { Shard } from '../shard.js';

/** <stateDir>/engine-homes: passable (0711) but not listable; each HOME under it is its uid's alone. */
export function engineHomesDir(stateDir: string): string {
  return join(stateDir, 'engine-homes');
}

export function engineHome(stateDir: string, uid: number): string {
  return join(engineHomesDir(stateDir), String(uid));
}

/**
 * The uid a (re)started shard runs as: the one its record holds (a restart, or an engine a
 * previous agent started), else the lowest of the range no shard of this agent holds. Called
 * with no await between it and the record entering core.shards, so two starts never pick the
 * same one. Undefined without --engine-uid-range.
 */
export function chooseEngineUid(core: SupervisorCore, existing: Shard | undefined): number | undefined {
  const range = core.options.engineUids;
  if (!range || !core.options.engineUser) return undefined;
  if (existing?.record.uid !== undefined) return existing.record.uid;
  const held = new Set<number>();
  for (const shard of core.shards.values()) if (shard.record.uid !== undefined) held.add(shard.record.uid);
  for (let uid = range.from; uid <= range.to; uid++) if (!held.has(uid)) return uid;
  throw ApplicationFailure.nonRetryable(
    `every uid of --engine-uid-range ${range.from}-${range.to} is held by a shard of this agent: give a larger range`,
    FailureType.NoCapacity,
  );
}

/**
 * Who a shard's processes run as (uid: its record's): its own uid in the engine user's group with a HOME of its
 * own, or the engine user (no range), or undefined (the agent's own user).
 */
export function shardUser(core: SupervisorCore, uid: number | undefined): EngineUser | undefined {
  const user = core.options.engineUser;
  if (!user || uid === undefined) return user;
  return { name: `${user.name}-${uid}`, uid, gid: user.gid, home: engineHome(core.options.stateDir, uid) };
}

/**
 * Makes the shard's HOME (0700, its uid's). `fresh`: a shard new to this uid, which must find
 * nothing a previous holder of the uid left there (a cached token, a planted config).
 */
export function prepareEngineHome(stateDir: string, user: EngineUser, fresh: boolean): void {
  const homes = engineHomesDir(stateDir);
  mkdirSync(homes, { recursive: true, mode: 0o711 });
  chmodSync(homes, 0o711);
  checkTraversable(homes);
  const home = user.home;
  if (fresh) rmSync(home, { recursive: true, force: true });
  mkdirSync(home, { recursive: true, mode: 0o700 });
  // The uid cannot swap its HOME for a link: the dir above is root's. Still, never chown through one.
  if (!lstatSync(home).isDirectory()) throw new Error(`${home} is not a directory`);
  chownSync(home, user.uid, user.gid);
  chmodSync(home, 0o700);
}

// A uid of the range belongs to no group of the path: it passes a directory only where others may.
function checkTraversable(dir: string): void {
  for (let path = dir; ; path = dirname(path)) {
    if ((statSync(path).mode & 0o001) === 0) {
      throw ApplicationFailure.nonRetryable(
        `${path} is not passable by others (o+x), so an engine with a uid of --engine-uid-range cannot reach its HOME under ${dir}`,
        FailureType.StateDirUnwritable,
      );
    }
    if (dirname(path) === path) return;
  }
}
