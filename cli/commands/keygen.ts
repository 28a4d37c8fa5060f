// `llmgw keygen FILE`: the control plane's Ed25519 key pair (common/catalog-key.ts does the work).
import type { Command } from 'commander';

export function register(program: Command): void {
  program
    .command('keygen')
    .description("make the control plane's Ed25519 key pair: FILE (0600) for control workers, FILE.pub for agents and routers")
    .argument('<file>', 'the private key file to create (left alone when it exists)')
    .action(async (file: string) => {
      const { ensureCatalogKeyFile, publicKeyFileOf } = await import('../../common/catalog-key.js');
      const created = ensureCatalogKeyFile(file);
      console.log(`${created ? 'created' : 'kept the existing'} ${file}; public keys in ${publicKeyFileOf(file)}`);
    });
}
