// Names that reach visibility queries and file paths are held to one spelling, and each place
// they enter (catalog, CLI/workflow input, agent flags, discovery) names the field it refused.
import { describe, expect, it } from 'vitest';
import { parseAgentFlags } from '../../agent/config.js';
import { gpuClassFromName } from '../../agent/discovery/gpu-class.js';
import { parseCatalog } from '../../catalog/load.js';
import { isSafeName, queryLiteral } from '../../common/safe-name.js';
import { DeployModelInputSchema } from '../../workflows/deploy-model/input.js';
import { describeIssues } from '../../workflows/toolkit.js';

const HOSTILE = ["H100' OR WorkflowType = 'node", '../../etc', 'a b', '', '-lead', 'x'.repeat(64), 'é'];

function catalogWithClass(gpuClass: string): string {
  return `models:\n  - name: demo\n    source: llmgw/demo\n    profiles:\n      - name: one\n        engine: fake\n        gpuClass: ${JSON.stringify(gpuClass)}\n        gpusPerNode: 1\n`;
}

describe('names that reach queries and paths', () => {
  it('accepts the names in use and refuses quotes, slashes, spaces, a leading "-" and more than 63 characters', () => {
    for (const good of ['H100', 'L40S', 'RTX6000Ada', 'node-1.rack_2', 'x'.repeat(63)]) expect(isSafeName(good), good).toBe(true);
    for (const bad of HOSTILE) expect(isSafeName(bad), bad).toBe(false);
  });

  it('refuses a hostile gpuClass in the catalog, naming the field and its line', () => {
    const good = parseCatalog(catalogWithClass('H100'));
    expect(good.ok, JSON.stringify(good)).toBe(true);
    const result = parseCatalog(catalogWithClass("H100' OR WorkflowType = 'node"));
    expect(result.ok).toBe(false);
    if (result.ok) return;
    expect(result.errors[0]).toMatchObject({ path: 'models[0].profiles[0].gpuClass', line: 7 });
    expect(result.errors[0]?.message).toMatch(/^gpuClass must be letters, digits/);
  });

  it('refuses a hostile gpuClass or model in a deploy request (the CLI and the workflow share the schema)', () => {
    const parsed = DeployModelInputSchema.safeParse({ model: 'demo', gpuClass: "H100' OR 'a'='a" });
    expect(parsed.success).toBe(false);
    if (!parsed.success) expect(describeIssues(parsed.error)).toMatch(/^gpuClass: gpuClass must be letters/);
    const model = DeployModelInputSchema.safeParse({ model: 'demo/../x' });
    expect(model.success).toBe(false);
  });

  it('refuses a node id that would escape the state dir or a task queue', () => {
    expect(() => parseAgentFlags({ nodeId: '../../root' })).toThrow(/--node-id: node ids must be letters, digits/);
  });

  it('quotes a safe value for a query and fails non-retryably on anything else', () => {
    expect(queryLiteral('gpuClass', 'H100')).toBe("'H100'");
    let caught: unknown;
    try {
      queryLiteral('gpuClass', "H100' OR 'a'='a");
    } catch (error) {
      caught = error;
    }
    expect(caught).toMatchObject({ type: 'InvalidInput', nonRetryable: true });
    expect(String((caught as Error).message)).toMatch(/^gpuClass "H100' OR 'a'='a" cannot be used in a visibility query/);
  });

  it('derives a GPU class a query can carry from any name a driver reports', () => {
    expect(gpuClassFromName('NVIDIA H100 80GB HBM3')).toBe('H100');
    expect(gpuClassFromName("NVIDIA Weird'GPU X")).toBe('Weird-GPU');
    expect(isSafeName(gpuClassFromName(`NVIDIA ${'Z'.repeat(100)}`))).toBe(true);
  });
});
