// The CLI with the input a new user tries first: every refusal says what was wrong and what
// is valid, and starts nothing. On a dev server of this file's own, so that "no deployModel
// workflow was started" counts this file's workflows only.
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { WorkflowNotFoundError } from '@temporalio/client';
import { E2E_CATALOG, INVENTORIES, runLlmgw, uniqueId, useIsolatedFleet } from '../helpers/fleet.js';

const fleet = useIsolatedFleet({ ownTemporal: 'cli-input' });

describe('the CLI refuses bad input in words a new user can act on', () => {
  it('refuses an unknown model before any workflow starts, naming the valid models', async () => {
    const refused = await runLlmgw(['deploy', 'nosuch', '--catalog', E2E_CATALOG]);
    expect(refused.code, refused.output).toBe(1);
    expect(refused.output).toMatch(/unknown model "nosuch"; valid models: demo, life/);
    expect(refused.output).not.toMatch(/started/);
    const described = fleet.client.workflow.getHandle('deployment/nosuch').describe();
    await expect(described).rejects.toBeInstanceOf(WorkflowNotFoundError);
  });

  it("answers a rejected Update in the workflow's own words, and shows each endpoint once", async () => {
    await fleet.agent(uniqueId('cli-a'), { inventory: join(INVENTORIES, 'lifex8.yaml') });
    const name = uniqueId('cli-life');
    const deployed = await runLlmgw(['deploy', 'life', '--name', name, '--wait', '--timeout', '60', '--catalog', E2E_CATALOG]);
    expect(deployed.code, deployed.output).toBe(0);

    // Checked here first, against the catalog…
    const local = await runLlmgw(['deploy', 'life', '--name', name, '--profile', 'nope', '--catalog', E2E_CATALOG]);
    expect(local.code, local.output).toBe(1);
    expect(local.output).toMatch(/unknown profile "nope" for model life; valid profiles: one-gpu, tp2/);
    // …and without that check, by the running deployment's rollout Update, whose reason arrives intact.
    const update = await runLlmgw(['deploy', 'life', '--name', name, '--profile', 'nope', '--no-catalog']);
    expect(update.code, update.output).toBe(1);
    expect(update.output).not.toMatch(/Workflow Update failed/);
    expect(update.output).toMatch(/nope/);
    expect(update.output).toMatch(/one-gpu/);

    const status = await runLlmgw(['status', name]);
    expect(status.code, status.output).toBe(0);
    const endpoint = /http:\/\/127\.0\.0\.1:\d+/.exec(status.output)?.[0];
    expect(endpoint, status.output).toBeDefined();
    expect(status.output.split(endpoint ?? '').length - 1, status.output).toBe(1);
    expect(status.output).toMatch(/serving/);

    const undeployed = await runLlmgw(['undeploy', name]);
    expect(undeployed.code, undeployed.output).toBe(0);
  });
});
