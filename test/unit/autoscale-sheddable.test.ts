// The autoscaler and sheddable demand (issue 39): requests held at the routers count towards a
// scale-up, except sheddable ones when the deployment's autoscale says `ignoreSheddable`; those
// still wake a deployment at zero, since otherwise they could only time out.
import { describe, expect, it } from 'vitest';
import { Registry } from 'prom-client';
import { autoscalePolicy, AutoscaleSchema } from '../../common/autoscale.js';
import type { AutoscaleDecision } from '../../common/replica-types.js';
import { Autoscaler } from '../../router/autoscale/autoscaler.js';
import type { LoadReport } from '../../router/autoscale/load-report.js';
import { StaticRouteSource, type DeploymentEntry } from '../../router/routes/table.js';

const ENGINE = 'http://127.0.0.1:9';

async function decide(ignoreSheddable: boolean, desired: number, held: { all: number; sheddable: number }) {
  const settings = AutoscaleSchema.parse({ min: 0, max: 4, target: 2, upAfterSeconds: 0, ...(ignoreSheddable ? { ignoreSheddable } : {}) });
  const deployment: DeploymentEntry = {
    name: 'batchy',
    servedName: 'batchy',
    model: 'batchy',
    phase: desired === 0 ? 'Idle' : 'Ready',
    desired,
    autoscale: autoscalePolicy(settings),
  };
  const source = new StaticRouteSource(desired === 0 ? [] : [{ servedName: 'batchy', endpoint: ENGINE, deployment: 'batchy' }]);
  source.setDeployments([deployment]);
  const decisions: AutoscaleDecision[] = [];
  let wakes = 0;
  const report: LoadReport = {
    queued: { batchy: held.all },
    sheddable: { batchy: held.sheddable },
    engines: { [ENGINE]: { running: 2, waiting: 0, kvUsage: 0.1, requests: 1, inflight: 2, at: Date.now() } },
  };
  const autoscaler = new Autoscaler({
    control: {
      decide: (_name: string, decision: AutoscaleDecision) => {
        decisions.push(decision);
        return Promise.resolve({ accepted: true as const, desired: decision.desired });
      },
      wake: () => {
        wakes++;
        return Promise.resolve({ accepted: true as const, desired: 1 });
      },
    },
    registry: new Registry(),
    reports: () => [report],
    routerId: 'test',
    log: () => undefined,
  });
  autoscaler.setTable(await source.fetch());
  const now = Date.now();
  for (let i = 0; i < 3; i++) autoscaler.tick(now + i * 1000);
  await new Promise((r) => setTimeout(r, 10));
  autoscaler.stop();
  return { decisions, wakes };
}

describe('sheddable demand and the autoscaler', () => {
  it('scales up for held sheddable requests unless the policy ignores them', async () => {
    const counted = await decide(false, 1, { all: 10, sheddable: 10 });
    expect(counted.decisions[0]).toMatchObject({ desired: 4 });
    const ignored = await decide(true, 1, { all: 10, sheddable: 10 });
    expect(ignored.decisions).toEqual([]);
    // Standard requests held beside them still count.
    const mixed = await decide(true, 1, { all: 10, sheddable: 6 });
    expect(mixed.decisions[0]).toMatchObject({ desired: 3 });
  });

  it('still wakes a deployment at zero for sheddable requests alone', async () => {
    expect((await decide(true, 0, { all: 3, sheddable: 3 })).wakes).toBe(1);
  });

  it('publishes ignoreSheddable only when set, so that older policies compare and sign as before', () => {
    expect(autoscalePolicy(AutoscaleSchema.parse({ min: 0, max: 2 }))).not.toHaveProperty('ignoreSheddable');
    expect(autoscalePolicy(AutoscaleSchema.parse({ min: 0, max: 2, ignoreSheddable: true }))).toMatchObject({ ignoreSheddable: true });
    expect(() => AutoscaleSchema.parse({ min: 0, max: 2, ignoreSheddable: 'yes' })).toThrow(/ignoreSheddable must be true or false/);
  });
});
