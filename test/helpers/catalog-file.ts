// A catalog written to a file in a directory of its own, for the tests and benches that start a
// control worker with --catalog.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** Writes `yaml` to catalog.yaml in a new temporary directory named from `prefix`; returns its path. */
export function writeCatalogFile(prefix: string, yaml: string): string {
  const file = join(mkdtempSync(join(tmpdir(), prefix)), 'catalog.yaml');
  writeFileSync(file, yaml);
  return file;
}

/** A catalog of one model from `source` with one profile (a YAML flow mapping); replicas drain for 1 s. */
export function oneModelCatalog(model: string, source: string, profile: string): string {
  return `defaults: { drainGraceSeconds: 1 }\nmodels:\n  - name: ${model}\n    source: ${source}\n    profiles:\n      - ${profile}\n`;
}
