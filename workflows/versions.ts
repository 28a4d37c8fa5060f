// Patch ids that gate whole generations of workflow code. A run recorded before a gate replays
// the frozen code of its generation (workflows/legacy/); every run started after it records
// the marker and runs the current code. See docs/upgrades.md for when to add one.

/** The release that introduced Worker Versioning, bounded histories and the capacity index. */
export const VERSIONED_RELEASE = 'llmgw-versioned-1';

/** A replica re-placing away from an agent it thinks gone first tries once, quickly, to stop what runs there. */
export const QUICK_STOP_ON_AGENT_GONE = 'replica-quick-stop-on-agent-gone';

/** A replica that was woken while already placing passes the wake-up on once placed. */
export const FORWARD_UNUSED_WAKE = 'replica-forward-unused-wake';

/** A replica that has just turned Unschedulable looks once more shortly after. */
export const RECHECK_AFTER_WAITING = 'replica-recheck-after-waiting';

/**
 * A replica passes on every wake-up it did not use, not only those that came while it was
 * placing: two releases at once both name the oldest waiter (visibility shows a replica
 * Unschedulable until it is Ready), so wake-ups that arrived in one wait, or while it was
 * already starting, woke nobody else.
 */
export const FORWARD_EVERY_WAKE = 'replica-forward-every-wake';
/**
 * A replica tells the routes workflow only what routers act on: whether it is routable, at
 * which endpoint and revision, and when it is gone. Placing, Starting and Loading were three
 * signals per replica (and three table versions every router was woken for) that changed
 * nothing a router does.
 */
export const ROUTE_CHANGES_ONLY = 'replica-route-changes-only';
/**
 * A deployment writes its search attributes and memo only when they change, not on every
 * replica's phase change (which only its details, free to update, show).
 */
export const DEPLOYMENT_PUBLISH_WHAT_CHANGED = 'deployment-publish-what-changed';
/**
 * A replica run of this generation takes every replica patch above (VERSIONED_RELEASE,
 * QUICK_STOP_ON_AGENT_GONE, FORWARD_UNUSED_WAKE, RECHECK_AFTER_WAITING, FORWARD_EVERY_WAKE,
 * ROUTE_CHANGES_ONLY) on this one marker. Every marker also upserts TemporalChangeVersion: three
 * per replica were three events and visibility writes each. A later replica patch is asked on
 * its own (or starts the next generation, which then implies this one's).
 */
export const REPLICA_GENERATION_2 = 'replica-generation-2';
/**
 * A replica tells its deployment only what the deployment acts on or must show: Ready, Unknown,
 * Unschedulable, Draining, Stopped, Failed, and every restart or re-placement. Placing,
 * Starting and Loading of a healthy start were three signals per replica (each an event pair
 * and a workflow task on the replica, an event and a workflow task on the deployment) that
 * changed no decision; the CLI asks a replica that is coming up for its step (`llmgw status`),
 * and its own workflow shows it.
 */
export const DEPLOYMENT_CHANGES_ONLY = 'replica-deployment-changes-only';
/**
 * A replica run of this generation takes every patch of generation 2 and DEPLOYMENT_CHANGES_ONLY
 * on this one marker (see REPLICA_GENERATION_2 for why one marker, not one per patch).
 */
export const REPLICA_GENERATION_3 = 'replica-generation-3';

/**
 * A replica asks for its placement in a local activity: the control worker that runs the
 * replica's workflow task runs placeReplica at once, and its answer is one marker in the same
 * workflow task. As an activity it was three events, a task through the server's matching
 * and a second workflow task to read the answer, per placement.
 *
 * Withdrawn by generation 6, before any release: a placement waits on node workflows (their
 * reserve Updates and queries) run by the same control workers, and a local activity holds
 * its replica's workflow task the whole time. In bench:fleet at 200 hosts, once a host was
 * killed, placements ran past their 20 s again and again and 79 replicas failed with "Local
 * Activity timed out". Runs of generations 4 and 5 (recorded in .v5 and .v6 histories) replay
 * with it; no other run asks for it.
 */
export const LOCAL_PLACEMENT = 'replica-local-placement';
/** A replica run of this generation takes every patch of generation 3 and LOCAL_PLACEMENT on one marker. */
export const REPLICA_GENERATION_4 = 'replica-generation-4';

/**
 * A replica writes its memo (route and demand) only when what its readers act on changes
 * (routable at an endpoint, waiting for GPUs, neither), not on every step; and, while placement
 * was a local activity (generations 4 and 5), the Placing of a new run's first look was not
 * written at all: the placement answered in the same workflow task, so nobody could see it.
 * Each write was an event and a visibility update (a row written in PostgreSQL); search
 * attributes still follow every phase.
 */
export const QUIET_STEPS = 'replica-quiet-steps';
/** A replica run of this generation takes every patch of generation 4 and QUIET_STEPS on one marker. */
export const REPLICA_GENERATION_5 = 'replica-generation-5';

/**
 * A replica run of this generation takes every patch of generation 5 but LOCAL_PLACEMENT
 * (withdrawn: see there) on one marker.
 */
export const REPLICA_GENERATION_6 = 'replica-generation-6';

/**
 * The replica patches each generation marker implies: a later generation implies the earlier
 * ones' patches, less those it withdraws. A withdrawn patch is never asked on its own again.
 */
export const REPLICA_GENERATIONS: ReadonlyArray<{ marker: string; patches: readonly string[]; withdraws?: readonly string[] }> = [
  {
    marker: REPLICA_GENERATION_2,
    patches: [
      VERSIONED_RELEASE,
      QUICK_STOP_ON_AGENT_GONE,
      FORWARD_UNUSED_WAKE,
      RECHECK_AFTER_WAITING,
      FORWARD_EVERY_WAKE,
      ROUTE_CHANGES_ONLY,
    ],
  },
  { marker: REPLICA_GENERATION_3, patches: [DEPLOYMENT_CHANGES_ONLY] },
  { marker: REPLICA_GENERATION_4, patches: [LOCAL_PLACEMENT] },
  { marker: REPLICA_GENERATION_5, patches: [QUIET_STEPS] },
  { marker: REPLICA_GENERATION_6, patches: [], withdraws: [LOCAL_PLACEMENT] },
];
