/** An id an error message shows: a secret key pasted where an id belongs shows its display prefix only. */
import { describe, expect, it } from 'vitest';
import { shownId } from '../../src/auth/keys.js';

describe('shownId', () => {
  const key = `sk-mg-${'A1b2C3d4'.repeat(6)}`;
  it('cuts a key to its display prefix, pasted bare, with its header scheme or with a stray space', () => {
    for (const pasted of [key, `Bearer ${key}`, ` ${key}`, `\t${key}\n`]) {
      expect(shownId(pasted)).toBe('sk-mg-A1b2…');
    }
    expect(shownId('sk-proj-UPSTREAMKEY0123456789')).toBe('sk-proj-UP…');
  });

  it('shows any other id, up to 200 characters', () => {
    expect(shownId('acct_42')).toBe('acct_42');
    expect(shownId('x'.repeat(300))).toHaveLength(200);
  });
});
