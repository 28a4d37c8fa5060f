// The llmgw version a control-worker build id names (`0.2.0-0123456789ab` → 0.2.0), and whether
// it is older than a release. Shared by `llmgw upgrade` and the opening of carried state.

/** `0.1.0-0123456789ab` → [0, 1, 0]; a build id with no version (an unversioned run) → undefined. */
export function versionOfBuild(buildId: string): number[] | undefined {
  const match = /^(\d+)\.(\d+)\.(\d+)/.exec(buildId);
  return match ? match.slice(1, 4).map(Number) : undefined;
}

/** Whether `buildId` is of a version before `release`; a build id with no version counts as older. */
export function predates(buildId: string, release: string): boolean {
  const build = versionOfBuild(buildId);
  const first = versionOfBuild(release)!;
  if (!build) return true;
  for (let i = 0; i < 3; i++) if (build[i] !== first[i]) return build[i]! < first[i]!;
  return false;
}
