// Compares a StartShard request with the spec already recorded for the same shard id. Agent
// side: starting is idempotent for an equal spec and refused for a different one, and the
// refusal names the fields so that whoever sent it can see what changed.
import { clone, equals, toJson, type JsonValue } from '@bufbuild/protobuf';
import { StartShardSchema, type StartShard } from '../../../proto/gen/llmgw/v1/shard_pb.js';

/**
 * The request's http_port 0 means "the agent picks", so it matches whatever port was picked;
 * an explicit port must match the one the shard has.
 */
function normalisedPair(recorded: StartShard, recordedPort: number, requested: StartShard): [StartShard, StartShard] {
  const a = clone(StartShardSchema, recorded);
  // The ticket is the start's authority, checked on its own against every field here: one
  // renewed for the same placement (a restart, a run continued as new) changes nothing that runs.
  a.placementTicket = requested.placementTicket;
  // So is rank 0's signature over the leader port (checked with the ticket): signed afresh each time.
  a.leaderAttestation = requested.leaderAttestation;
  a.httpPort = requested.httpPort === 0 ? 0 : a.httpPort || recordedPort;
  // Likewise rank 0's leader port 0: the agent chose the rendezvous port (and its own address).
  if (requested.rank === 0 && requested.leaderPort === 0) {
    a.leaderPort = 0;
    a.leaderAddress = requested.leaderAddress;
  }
  return [a, requested];
}

function diffJson(a: JsonValue | undefined, b: JsonValue | undefined, path: string, out: string[]): void {
  if (JSON.stringify(a) === JSON.stringify(b)) return;
  const isObject = (v: JsonValue | undefined): v is { [k: string]: JsonValue } => typeof v === 'object' && v !== null && !Array.isArray(v);
  if (isObject(a) && isObject(b)) {
    for (const key of [...new Set([...Object.keys(a), ...Object.keys(b)])].sort()) {
      diffJson(a[key], b[key], path ? `${path}.${key}` : key, out);
    }
    return;
  }
  out.push(path || '(whole spec)');
}

/** The differing fields in proto JSON names (e.g. `gpuIndices`, `profile.args`); [] when equal. */
export function specDifferences(recorded: StartShard, recordedPort: number, requested: StartShard): string[] {
  const [a, b] = normalisedPair(recorded, recordedPort, requested);
  if (equals(StartShardSchema, a, b)) return [];
  const out: string[] = [];
  diffJson(toJson(StartShardSchema, a, { alwaysEmitImplicit: true }), toJson(StartShardSchema, b, { alwaysEmitImplicit: true }), '', out);
  // equals() and JSON can disagree only on representation; never report "different" with no field.
  return out.length > 0 ? out : ['(unnamed field)'];
}
