// What every operator command shares: one Temporal client per command, closed after it,
// and an error that says how to reach Temporal when it cannot be reached.
import type { Client } from '@temporalio/client';
import { connectClient, temporalConfig } from '../../temporal/connection.js';

/** An error meant for the operator: main prints its message alone. */
export class CliError extends Error {}

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
