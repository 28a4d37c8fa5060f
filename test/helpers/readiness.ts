// Readiness as Temporal's visibility shows it (the LlmgwState search attribute): no worker
// has to answer, so a dead control worker's queries, stuck on its sticky queue until the
// server gives up on it, are not mistaken for replicas that stopped being Ready.
import type { Client } from '@temporalio/client';

const READY = `ExecutionStatus = 'Running' AND LlmgwState = 'Ready'`;

/** Ready replicas of a deployment now. */
export async function readyReplicas(client: Client, deployment: string): Promise<number> {
  return (await client.workflow.count(`${READY} AND WorkflowType = 'replica' AND LlmgwDeployment = '${deployment}'`)).count;
}

/** Every deployment Ready, each with exactly its replicas Ready. */
export async function deploymentsReady(client: Client, wanted: { name: string; replicas: number }[]): Promise<boolean> {
  const names = wanted.map((d) => `'${d.name}'`).join(', ');
  const deployments = await client.workflow.count(`${READY} AND WorkflowType = 'deployModel' AND LlmgwDeployment IN (${names})`);
  if (deployments.count !== wanted.length) return false;
  for (const d of wanted) if ((await readyReplicas(client, d.name)) !== d.replicas) return false;
  return true;
}
