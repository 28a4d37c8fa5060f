// What the agent checks before it touches anything: its state dir, which revisions it may
// start (the catalog key), and the host variables engines may get. Agent side. Each problem
// stops the agent with a message naming the flag; warnings (loose file modes) are logged.
import { keyFileWarnings, legacyKeys, readVerifyingKeys } from '../common/catalog-key.js';
import type { LineLog } from '../common/logger.js';
import type { AgentConfig } from './config.js';
import { envFileWarnings, readEnvFile } from './engines/host-variables.js';
import type { RevisionPolicy } from './revision-check.js';
import { checkStateDirWritable } from './supervisor/spec-store.js';

export function preflight(config: AgentConfig, log: LineLog): RevisionPolicy {
  // An agent that cannot write specs cannot start engines safely, nor identify them after
  // a restart: refuse to run rather than half-work.
  checkStateDirWritable(config.stateDir);
  // Secrets stay on the host: a bad env file stops the agent now; names only are logged.
  if (config.envFile !== undefined) {
    const names = Object.keys(readEnvFile(config.envFile));
    for (const warning of envFileWarnings(config.envFile)) log(warning, 'warn');
    log(`env file ${config.envFile}: ${names.length} variable(s) engines may reference (${names.join(', ') || 'none'})`);
  }
  if (config.passEnv.length > 0) log(`passing ${config.passEnv.join(', ')} from this agent's environment to every engine`);
  return revisionPolicyOf(config, log);
}

/** Which revisions this agent starts; a key file that cannot be read stops the agent now. */
function revisionPolicyOf(config: AgentConfig, log: LineLog): RevisionPolicy {
  if (config.catalogKey !== undefined) {
    const keys = readVerifyingKeys(config.catalogKey);
    for (const warning of keyFileWarnings(config.catalogKey)) log(warning, 'warn');
    const legacy = legacyKeys(keys);
    if (legacy.length > 0) {
      log(
        `catalog key file ${config.catalogKey} still holds the shared HMAC key ${legacy.join(', ')}: accepted while moving to Ed25519, but whoever takes this host can sign with it; remove the line once every control worker signs with Ed25519 (docs/security.md)`,
        'warn',
      );
    }
    log(
      `catalog key(s) ${keys.all.map((k) => k.id).join(', ')} from ${config.catalogKey}: only revisions the control worker signed start here`,
    );
    return { kind: 'keys', file: config.catalogKey };
  }
  if (config.insecureUnsigned) {
    log('--insecure-unsigned: starting revisions nobody signed; anyone who can start a workflow can run anything on this host', 'warn');
    return { kind: 'insecure-unsigned' };
  }
  log(
    'no catalog key (--catalog-key FILE or LLMGW_CATALOG_KEY_FILE): this agent adopts and reports, but starts no engine (see docs/security.md)',
    'warn',
  );
  return { kind: 'no-key' };
}
