// How a Pinned long-running workflow (deployModel, replica, node, routes) moves to a new llmgw build:
// only at continue-as-new, never in the middle of a run. Workflow side; `llmgw upgrade`
// (cli/actions/upgrade.ts) is the other half.
//
// 1. `llmgw upgrade` makes the new build Current and sends `prepareUpgrade` to each run that is
//    pinned to an older build. The run finishes what it is doing and continues-as-new with
//    `upgrading: true` and AutoUpgrade as its initial behaviour.
// 2. A server that supports upgrade-on-continue-as-new starts the new run on the Current build
//    at once. Temporal 1.29 (the pinned dev server) does not: the new run inherits the old
//    pinning. So a run that starts with `upgrading: true` first *parks*: it registers its
//    handlers and waits for `upgradeApplied`, issuing the same command on every build (one
//    timer), and `llmgw upgrade` meanwhile moves it to the Current build with a
//    versioning override. The new build replays the parked prologue identically and goes on.
// 3. A park that is never released (the command died) ends after PARK_TIMEOUT and the run
//    simply carries on where it is.
//
// The prologue is a contract between builds: every build must park exactly like this.
import { condition, defineQuery, defineSignal, makeContinueAsNewFunc, setHandler, workflowInfo, type Workflow } from '@temporalio/workflow';

export const prepareUpgradeSignal = defineSignal<[{ buildId?: string }]>('prepareUpgrade');
export const upgradeAppliedSignal = defineSignal<[]>('upgradeApplied');
/** Whether the run is parked waiting to be moved (answered without adding events). */
export const upgradeStatusQuery = defineQuery<{ parked: boolean; requested: boolean; buildId: string }>('upgradeStatus');

/** Part of the cross-build contract: never change it. */
const PARK_TIMEOUT = '10 minutes';

export interface UpgradeWatch {
  /** A newer build is Current and this run should hand over at its next safe point. */
  requested(): boolean;
  /** Registers nothing that issues commands; call before the workflow's first await. */
  park(upgrading: boolean | undefined): Promise<void>;
}

export function watchUpgrades(): UpgradeWatch {
  let requested = false;
  let parked = false;
  let applied = false;
  // A run already on the build being rolled out has nothing to hand over to.
  setHandler(prepareUpgradeSignal, ({ buildId }) => {
    if (!buildId || buildId !== workflowInfo().currentDeploymentVersion?.buildId) requested = true;
  });
  setHandler(upgradeAppliedSignal, () => void (applied = true));
  setHandler(upgradeStatusQuery, () => ({ parked, requested, buildId: workflowInfo().currentDeploymentVersion?.buildId ?? '' }));
  return {
    requested: () => requested || workflowInfo().targetWorkerDeploymentVersionChanged === true,
    async park(upgrading) {
      if (!upgrading) return;
      parked = true;
      await condition(() => applied, PARK_TIMEOUT);
      parked = false;
    },
  };
}

/**
 * Continues as new; on an upgrade, asks for AutoUpgrade so a server that supports it starts
 * the next run on the Current build (older servers ignore it and `llmgw upgrade` moves it).
 */
export function continueAsNewWith<F extends Workflow>(upgrade: boolean): (...args: Parameters<F>) => Promise<never> {
  // The server starts the next run without the memo and search attributes this one wrote:
  // hand ours over, so the router, placement and the CLI see no gap.
  const info = workflowInfo();
  const ours = Object.fromEntries(Object.entries(info.searchAttributes ?? {}).filter(([key]) => key.startsWith('Llmgw')));
  return makeContinueAsNewFunc<F>({
    memo: info.memo ?? {},
    searchAttributes: ours,
    ...(upgrade ? { initialVersioningBehavior: 'AUTO_UPGRADE' } : {}),
  });
}
