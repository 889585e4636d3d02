import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  MAX_NANO,
  NANO_PER_USD,
  PICO_PER_NANO,
  affordableUnits,
  cost,
  costOf,
  formatPrice,
  formatUsd,
  parsePrice,
  parseUsd,
  usdNumber,
} from '../../src/billing/money.js';
import { createMemoryStores } from '../../src/stores/memory/index.js';
import { chargesOf } from '../helpers/billing.js';

const ceilDiv = (a: bigint, b: bigint) => (a + b - 1n) / b;

describe('a million one-token debits at 0.000000075 USD', () => {
  const price = parsePrice('0.000000075');

  it('parses the price exactly', () => {
    expect(price).toBe(75_000n);
    expect(formatPrice(price)).toBe('0.000000075');
  });

  it('sum to exactly 0.075 USD, one cost() per call', () => {
    let total = 0n;
    for (let i = 0; i < 1_000_000; i++) total += cost(price, 1);
    expect(total).toBe(75_000_000n);
    expect(formatUsd(total)).toBe('0.075');
    // The same amount whether billed per call or all at once: no drift, no rounding loss.
    expect(cost(price, 1_000_000)).toBe(total);
  });

  it('through the memory BillingStore: 10,000 settled single-token charges debit exactly 0.00075 USD', async () => {
    const stores = createMemoryStores({ now: () => Date.UTC(2025, 0, 15) });
    const start = parseUsd('1');
    await stores.accounts.create({ id: 'a', grants: [], createdAt: 0 }, start);
    const n = 10_000;
    for (let i = 0; i < n; i++) {
      const holdId = `h${i}`;
      const hold = await stores.billing.placeHold({
        holdId,
        accountId: 'a',
        keyId: 'k',
        amount: cost(price, 1),
        monthlyCap: null,
        month: '2025-01',
        ttlMs: 60_000,
      });
      expect(hold.ok).toBe(true);
      const s = await stores.billing.settle({
        holdId,
        accountId: 'a',
        month: '2025-01',
        cost: cost(price, 1),
        entry: {
          id: holdId,
          accountId: 'a',
          keyId: 'k',
          model: 'm',
          units: { kind: 'tokens', prompt: 0, completion: 1 },
          measured: 'usage',
          at: 0,
        },
      });
      expect(s).toEqual({ settled: true, charged: 75n, held: 75n });
    }
    const wallet = await stores.billing.wallet('a');
    expect(wallet).toEqual({ balance: start - 750_000n, held: 0n });
    expect(formatUsd(start - wallet.balance)).toBe('0.00075');
    const ledger = await chargesOf(stores.billing.ledger('a'));
    expect(ledger).toHaveLength(n);
    expect(ledger.reduce((s, e) => s + e.cost, 0n)).toBe(750_000n);
    const usage = await stores.billing.keyUsage('a', 'k', '2025-01');
    expect(usage).toEqual({ total: 750_000n, monthly: 750_000n, held: 0n });
  });
});

describe('parsePrice / formatPrice', () => {
  it('accepts up to 12 decimals exactly', () => {
    expect(parsePrice('0.000000000001')).toBe(1n);
    expect(parsePrice('0.123456789012')).toBe(123_456_789_012n);
    expect(parsePrice('1')).toBe(1_000_000_000_000n);
    expect(parsePrice('12.5')).toBe(12_500_000_000_000n);
    expect(parsePrice('0.000001')).toBe(1_000_000n);
    expect(formatPrice(1n)).toBe('0.000000000001');
    expect(formatPrice(0n)).toBe('0');
  });

  it('rejects 13 decimals, negatives, exponents and junk', () => {
    for (const bad of ['0.0000000000001', '-1', '1e-7', '', '.5', '1.', 'abc', '0x10', '1,5']) {
      expect(() => parsePrice(bad), bad).toThrow(RangeError);
    }
  });

  it('round-trips every pico amount (property)', () => {
    fc.assert(
      fc.property(fc.bigInt({ min: 0n, max: 10n ** 27n - 1n }), (pico) => {
        const text = formatPrice(pico);
        expect(text).toMatch(/^\d+(\.\d{1,12})?$/);
        expect(text).not.toMatch(/\.\d*0$/);
        expect(parsePrice(text)).toBe(pico);
      }),
    );
  });

  it('round-trips decimal strings with up to 12 decimals, up to trailing zeros (property)', () => {
    fc.assert(
      fc.property(
        fc.bigInt({ min: 0n, max: 999_999_999_999_999n }),
        fc.string({ unit: fc.constantFrom(...'0123456789'), minLength: 0, maxLength: 12 }),
        (whole, frac) => {
          const text = frac ? `${whole}.${frac}` : `${whole}`;
          const canonical = text.includes('.') ? text.replace(/0+$/, '').replace(/\.$/, '') : text;
          expect(formatPrice(parsePrice(text))).toBe(canonical);
        },
      ),
    );
  });
});

describe('parseUsd / formatUsd', () => {
  it('reads JSON numbers through their shortest decimal form', () => {
    expect(parseUsd(10.5)).toBe(10_500_000_000n);
    expect(parseUsd(1e-7)).toBe(100n);
    expect(parseUsd(1e-9)).toBe(1n);
    expect(parseUsd(0.1)).toBe(100_000_000n);
    expect(parseUsd(0.3)).toBe(300_000_000n);
    expect(parseUsd(25)).toBe(25n * NANO_PER_USD);
    expect(parseUsd(1.5e-7)).toBe(150n);
    expect(parseUsd(1e6)).toBe(1_000_000n * NANO_PER_USD);
    expect(parseUsd('0.075')).toBe(75_000_000n);
  });

  it('rejects more than 9 decimals, negatives, non-finite and oversized amounts', () => {
    for (const bad of [1e-10, -1, Number.NaN, Number.POSITIVE_INFINITY, 1e21, '0.0000000001', '-5', '1e3']) {
      expect(() => parseUsd(bad as number), String(bad)).toThrow(RangeError);
    }
    expect(parseUsd(formatUsd(MAX_NANO))).toBe(MAX_NANO);
    expect(() => parseUsd(formatUsd(MAX_NANO + 1n))).toThrow(RangeError);
  });

  it('round-trips every nano amount through formatUsd (property)', () => {
    fc.assert(
      fc.property(fc.bigInt({ min: 0n, max: MAX_NANO }), (nano) => {
        expect(parseUsd(formatUsd(nano))).toBe(nano);
      }),
    );
  });

  it('writes the shortest exact decimal, as plain bigint division says (property)', () => {
    const reference = (nano: bigint) => {
      const abs = nano < 0n ? -nano : nano;
      const frac = (abs % NANO_PER_USD).toString().padStart(9, '0').replace(/0+$/, '');
      return `${nano < 0n ? '-' : ''}${abs / NANO_PER_USD}${frac ? `.${frac}` : ''}`;
    };
    for (const nano of [0n, 1n, -1n, 10n, 100_000_000n, NANO_PER_USD, -NANO_PER_USD * 3n, 1_000_000_010n]) expect(formatUsd(nano)).toBe(reference(nano));
    fc.assert(
      fc.property(fc.bigInt({ min: -MAX_NANO, max: MAX_NANO }), (nano) => {
        expect(formatUsd(nano)).toBe(reference(nano));
      }),
    );
  });

  it('round-trips amounts of up to 15 significant digits through a JSON number (property)', () => {
    // usdNumber is what GET /key shows; reading such a number back must give the same nanos.
    fc.assert(
      fc.property(fc.bigInt({ min: 0n, max: 10n ** 15n - 1n }), (nano) => {
        const n = usdNumber(nano);
        expect(typeof n).toBe('number');
        expect(parseUsd(n)).toBe(nano);
        expect(parseUsd(JSON.parse(JSON.stringify(n)) as number)).toBe(nano);
      }),
    );
  });
});

describe('cost / costOf', () => {
  it('rounds up to the nano-USD', () => {
    expect(cost(1n, 1)).toBe(1n); // 1 pico -> 1 nano
    expect(cost(1n, 1000)).toBe(1n);
    expect(cost(1n, 1001)).toBe(2n);
    expect(cost(999n, 1)).toBe(1n);
    expect(cost(1000n, 1)).toBe(1n);
    expect(cost(1001n, 1)).toBe(2n);
    expect(cost(0n, 123)).toBe(0n);
    expect(cost(5n, 0)).toBe(0n);
    expect(() => cost(5n, -1)).toThrow(RangeError);
  });

  it('prices with 12 decimals are billed exactly', () => {
    const p = parsePrice('0.000000123456'); // 123,456 pico per unit
    expect(p).toBe(123_456n);
    expect(cost(p, 1)).toBe(124n); // 123.456 nano -> 124
    expect(cost(p, 1000)).toBe(123_456n); // exactly 0.000123456 USD
    expect(formatUsd(cost(p, 1000))).toBe('0.000123456');
    expect(cost(parsePrice('0.000000000001'), 1_000_000_000_000)).toBe(NANO_PER_USD); // 1e12 units of 1e-12 = 1 USD
  });

  it('cost is the exact product rounded up once (property)', () => {
    fc.assert(
      fc.property(fc.bigInt({ min: 0n, max: 10n ** 15n }), fc.bigInt({ min: 0n, max: 10n ** 9n }), (price, units) => {
        const c = cost(price, units);
        const exact = price * units;
        expect(c * PICO_PER_NANO).toBeGreaterThanOrEqual(exact);
        expect(c * PICO_PER_NANO - exact).toBeLessThan(PICO_PER_NANO);
        expect(cost(price, Number(units))).toBe(c);
      }),
    );
  });

  it('costOf rounds the sum once: never more than the parts rounded separately (property)', () => {
    fc.assert(
      fc.property(
        fc.array(fc.tuple(fc.bigInt({ min: 0n, max: 10n ** 12n }), fc.integer({ min: 0, max: 1_000_000 })), { maxLength: 5 }),
        (parts) => {
          const total = costOf(parts);
          const exact = parts.reduce((s, [p, u]) => s + p * BigInt(u), 0n);
          expect(total).toBe(ceilDiv(exact, PICO_PER_NANO));
          const separately = parts.reduce((s, [p, u]) => s + cost(p, u), 0n);
          expect(total).toBeLessThanOrEqual(separately);
          expect(separately - total).toBeLessThan(BigInt(parts.length) + 1n);
        },
      ),
    );
  });

  it('per-call rounding never undercharges a sum of calls (property)', () => {
    fc.assert(
      fc.property(fc.bigInt({ min: 1n, max: 10n ** 9n }), fc.integer({ min: 1, max: 200 }), (price, calls) => {
        let sum = 0n;
        for (let i = 0; i < calls; i++) sum += cost(price, 1);
        expect(sum).toBeGreaterThanOrEqual(cost(price, calls));
        if (price % PICO_PER_NANO === 0n) expect(sum).toBe(cost(price, calls));
      }),
    );
  });
});

describe('affordableUnits', () => {
  it('examples', () => {
    // 1 USD budget, nothing fixed, 0.000002 USD per token: 500,000 tokens.
    expect(affordableUnits(NANO_PER_USD, 0n, parsePrice('0.000002'))).toBe(500_000n);
    expect(affordableUnits(10n, 10_000n, 1_000n)).toBe(0n); // the fixed part eats the budget
    expect(affordableUnits(10n, 20_000n, 1_000n)).toBe(0n); // never negative
    expect(affordableUnits(0n, 0n, 1n)).toBe(0n);
    expect(affordableUnits(1n, 0n, 0n)).toBe(MAX_NANO); // free units: unbounded
    expect(affordableUnits(0n, 0n, 0n)).toBe(0n);
  });

  it('is the largest count whose total cost fits the budget (property)', () => {
    fc.assert(
      fc.property(
        fc.bigInt({ min: 0n, max: MAX_NANO }),
        fc.bigInt({ min: 0n, max: 10n ** 20n }),
        fc.bigInt({ min: 1n, max: 10n ** 12n }),
        (budget, fixedPico, price) => {
          const u = affordableUnits(budget, fixedPico, price);
          expect(u).toBeGreaterThanOrEqual(0n);
          if (fixedPico >= budget * PICO_PER_NANO) {
            expect(u).toBe(0n);
            return;
          }
          // u units fit (as the gateway bills them: fixed + u x price, rounded up once)...
          expect(ceilDiv(fixedPico + u * price, PICO_PER_NANO)).toBeLessThanOrEqual(budget);
          // ...and one more does not.
          expect(ceilDiv(fixedPico + (u + 1n) * price, PICO_PER_NANO)).toBeGreaterThan(budget);
        },
      ),
    );
  });

  it('agrees with costOf at a text model\'s two prices (property)', () => {
    fc.assert(
      fc.property(
        fc.bigInt({ min: 0n, max: 10n ** 12n }),
        fc.integer({ min: 0, max: 100_000 }),
        fc.bigInt({ min: 1n, max: 10n ** 9n }),
        fc.bigInt({ min: 1n, max: 10n ** 9n }),
        (budget, promptTokens, promptPico, completionPico) => {
          const u = affordableUnits(budget, promptPico * BigInt(promptTokens), completionPico);
          if (u === 0n) return;
          expect(costOf([[promptPico, promptTokens], [completionPico, u]])).toBeLessThanOrEqual(budget);
          expect(costOf([[promptPico, promptTokens], [completionPico, u + 1n]])).toBeGreaterThan(budget);
        },
      ),
    );
  });
});
