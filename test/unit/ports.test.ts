// Port helpers: a port picked at random never lands on one the caller reserved for another part.
import { describe, expect, it } from 'vitest';
import { findFreePortAvoiding, isPortFree } from '../../common/ports.js';

describe('findFreePortAvoiding', () => {
  it('returns a free port the reservation does not claim', async () => {
    for (let i = 0; i < 20; i++) {
      const port = await findFreePortAvoiding((p) => p % 2 === 0);
      expect(port % 2).toBe(1);
      expect(await isPortFree(port)).toBe(true);
    }
  });

  it('gives up, saying so, when every port it is offered is reserved', async () => {
    await expect(findFreePortAvoiding(() => true)).rejects.toThrow(/no free port outside the reserved ones after 50 tries/);
  });
});
