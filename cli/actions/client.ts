// What every operator command shares: one Temporal client per command, closed after it, an
// error that says how to reach Temporal when it cannot be reached, and Updates whose
// rejection reaches the operator in the workflow's own words.
import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import { connectClient, temporalConfig } from '../../temporal/connection.js';
import { CliError, failureMessage } from '../errors.js';

export async function withClient<T>(body: (client: Client) => Promise<T>): Promise<T> {
  let client: Client;
  try {
    client = await connectClient();
  } catch (error) {
    throw new CliError(
      `cannot reach Temporal at ${temporalConfig().address}: ${error instanceof Error ? error.message : String(error)}. Is the server up (\`npm start\` or \`llmgw temporal start-dev\`)? Set TEMPORAL_ADDRESS if it is elsewhere.`,
    );
  }
  try {
    return await body(client);
  } finally {
    await client.connection.close();
  }
}

/**
 * Runs an Update (`send` calls executeUpdate). Its rejection (the ApplicationFailure a handler
 * or validator threw, which names what is valid) becomes the operator's error instead of
 * "Workflow Update failed"; a workflow that does not exist is left for the caller to name.
 */
export async function runUpdate<T>(send: () => Promise<T>): Promise<T> {
  try {
    return await send();
  } catch (error) {
    if (error instanceof WorkflowNotFoundError) throw error;
    throw new CliError(failureMessage(error));
  }
}
