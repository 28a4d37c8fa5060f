// Which LoRA adapters each Ready replica holds, for `llmgw status NAME`: read from the engines
// themselves (their /v1/models lists loaded adapters with a `parent`), so the answer is what is
// loaded, whichever router loaded it. Operator side; an engine the CLI cannot reach shows "?".
import type { DeploymentView } from '../../common/replica-types.js';

const READ_TIMEOUT_MS = 2000;

/** Replica id → its loaded adapters (undefined: its engine could not be read). Empty when no replica holds any. */
export async function adaptersByReplica(view: DeploymentView): Promise<Map<string, string[] | undefined>> {
  const out = new Map<string, string[] | undefined>();
  await Promise.all(
    view.replicas
      .filter((r) => r.phase === 'Ready' && r.endpoint !== '')
      .map(async (r) => {
        try {
          const res = await fetch(`${r.endpoint}/v1/models`, { signal: AbortSignal.timeout(READ_TIMEOUT_MS) });
          const body = (await res.json()) as { data?: Array<{ id?: unknown; parent?: unknown }> };
          const names = (body.data ?? [])
            .filter((m) => typeof m.parent === 'string' && typeof m.id === 'string')
            .map((m) => m.id as string);
          out.set(r.replicaId, names.sort());
        } catch {
          out.set(r.replicaId, undefined);
        }
      }),
  );
  return [...out.values()].some((names) => names === undefined || names.length > 0) ? out : new Map();
}

/** The table cell: the adapters, or "?" when the engine could not be read. */
export function adaptersCell(adapters: ReadonlyMap<string, string[] | undefined>, replicaId: string): string {
  if (!adapters.has(replicaId)) return '—';
  const names = adapters.get(replicaId);
  return names === undefined ? '?' : names.join(', ') || '—';
}
