// Keeping the pin: a resolve at rollout keeps the deployment's pinned commit while the catalog
// still writes the same source, and pins afresh only when it changed (or --refresh-source asks).
import { describe, expect, it } from 'vitest';
import { pinOrKeep } from '../../activities/weights-pin.js';

const OLD = 'a'.repeat(40);
// No hub is reachable here: a kept pin must not ask one.
const NO_HUB = { HF_ENDPOINT: 'http://127.0.0.1:9' };

describe('keeping the pinned commit', () => {
  it('keeps the pin while the catalog writes the same source', async () => {
    expect(await pinOrKeep('hf://o/m', { modelSource: `hf://o/m@${OLD}`, sourceAsWritten: 'hf://o/m' }, NO_HUB)).toBe(`hf://o/m@${OLD}`);
    expect(await pinOrKeep('hf://o/m@main', { modelSource: `hf://o/m@${OLD}`, sourceAsWritten: 'hf://o/m@main' }, NO_HUB)).toBe(
      `hf://o/m@${OLD}`,
    );
  });

  it('keeps a pin made before the catalog text was recorded, for the same repository at a moving ref', async () => {
    expect(await pinOrKeep('hf://o/m', { modelSource: `hf://o/m@${OLD}` }, NO_HUB)).toBe(`hf://o/m@${OLD}`);
  });

  it('uses a source the catalog changed to, pinned or not', async () => {
    const NEW = 'b'.repeat(40);
    expect(await pinOrKeep(`hf://o/m@${NEW}`, { modelSource: `hf://o/m@${OLD}`, sourceAsWritten: 'hf://o/m' }, NO_HUB)).toBe(
      `hf://o/m@${NEW}`,
    );
    expect(await pinOrKeep('file:///models/m', { modelSource: `hf://o/m@${OLD}`, sourceAsWritten: 'hf://o/m' }, NO_HUB)).toBe(
      'file:///models/m',
    );
    // Another repository at a branch must ask the hub (refused here: nothing listens).
    await expect(pinOrKeep('hf://o/other', { modelSource: `hf://o/m@${OLD}`, sourceAsWritten: 'hf://o/m' }, NO_HUB)).rejects.toThrow();
  });
});
