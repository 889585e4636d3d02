/**
 * Media models and prices for tests, the expected costs computed with the gateway's own exact
 * money functions, and a "freezable" view of a set of stores that simulates a crashed (or
 * stalled) gateway instance in process.
 */
import { countTokens } from 'gpt-tokenizer';
import { cost, parsePrice } from '../../src/billing/money.js';
import type { GatewayOptions } from '../../src/gateway.js';
import type { Stores } from '../../src/stores/types.js';
import { testConfig, type TestSetup, UPSTREAM_API_KEY } from './gateway.js';

type ModelInput = NonNullable<GatewayOptions['models']>[number];

export const IMAGE = 'test/image';
export const AUDIO = 'test/speech';
export const VIDEO = 'test/video';
/** An image model that prices only 480P and 720P. */
export const IMAGE_SMALL = 'test/image-small';

export const IMAGE_TIERS = { '480P': '0.02', '720P': '0.04', '1080P': '0.08', '4K': '0.16' } as const;
export const VIDEO_TIERS = { '480P': '0.05', '720P': '0.1', '1080P': '0.2', fast: '0.03' } as const;
export const SPEECH_PRICE = '0.000015';

/** The media models, all on `upstream` (optionally with other ids and upstream model names). */
export function mediaModels(upstream: string, opts: { suffix?: string; upstreamModels?: boolean } = {}): ModelInput[] {
  const s = opts.suffix ?? '';
  const up = (name: string) => (opts.upstreamModels ? { upstreamModel: name } : {});
  return [
    {
      id: IMAGE + s,
      type: 'image',
      name: 'Test Image',
      upstream,
      ...up('provider-image-1'),
      pricing: { unit: 'image', from: '0.02', tiers: { ...IMAGE_TIERS } },
    },
    {
      id: IMAGE_SMALL + s,
      type: 'image',
      upstream,
      pricing: { unit: 'image', from: '0.02', tiers: { '480P': '0.02', '720P': '0.04' } },
    },
    {
      id: AUDIO + s,
      type: 'audio',
      name: 'Test Speech',
      upstream,
      ...up('provider-tts-1'),
      pricing: { unit: 'token', from: SPEECH_PRICE, tiers: {} },
    },
    {
      id: VIDEO + s,
      type: 'video',
      name: 'Test Video',
      upstream,
      ...up('provider-video-1'),
      pricing: { unit: 'second', from: '0.05', tiers: { ...VIDEO_TIERS } },
      modes: ['fast'],
    },
  ];
}

/** nano-USD of `n` images at `tier`. */
export const imageCost = (tier: keyof typeof IMAGE_TIERS, n = 1) => cost(parsePrice(IMAGE_TIERS[tier]), n);
/** nano-USD of `seconds` of video at `tier`. */
export const videoCost = (tier: keyof typeof VIDEO_TIERS, seconds: number) => cost(parsePrice(VIDEO_TIERS[tier]), seconds);
/** Tokens of a speech input, counted with gpt-tokenizer itself. */
export const speechTokens = (input: string) => countTokens(input);
/** nano-USD of a speech input. */
export const speechCost = (input: string) => cost(parsePrice(SPEECH_PRICE), speechTokens(input));

export interface FreezableStores {
  /** Give these to the instance that will "crash". */
  stores: Stores;
  /**
   * From now on every store call of that instance hangs: it can no longer renew a lease,
   * update a job, settle or release. To the shared stores it is a dead instance.
   */
  freeze(): void;
  /** The instance comes back (a long pause, not a death): the queued calls run, in order. */
  thaw(): void;
  /** Store calls waiting while frozen. */
  queued(): number;
}

/** Wraps shared stores so that one gateway instance's access to them can be frozen. */
export function freezable(shared: Stores): FreezableStores {
  let frozen = false;
  const queue: Array<() => void> = [];
  const wrap = <T extends object>(target: T): T =>
    new Proxy(target, {
      get(t, prop) {
        const v = Reflect.get(t, prop, t) as unknown;
        if (typeof v !== 'function') return v;
        const fn = v as (...args: unknown[]) => Promise<unknown>;
        return (...args: unknown[]) => {
          if (!frozen) return fn.apply(t, args);
          return new Promise((resolve, reject) => {
            queue.push(() => {
              try {
                resolve(fn.apply(t, args));
              } catch (err) {
                reject(err);
              }
            });
          });
        };
      },
    });
  // Every store of the set (whatever stores the set has), each wrapped; close() is the owner's.
  const stores = Object.fromEntries(
    Object.entries(shared).map(([name, store]) => [
      name,
      typeof store === 'function' ? async () => {} : typeof store === 'object' && store !== null ? wrap(store) : store,
    ]),
  ) as unknown as Stores;
  return {
    stores,
    freeze() {
      frozen = true;
    },
    thaw() {
      frozen = false;
      for (const run of queue.splice(0)) run();
    },
    queued: () => queue.length,
  };
}

/**
 * The config of a media test with a media upstream of its own: the media models on upstream
 * `up` (at `mediaUrl`), the simulator as `test`, a 100 USD wallet, and `limits`.
 */
export function mediaSetup(mediaUrl: string, limits: GatewayOptions['limits'], extra: { now?: () => number } = {}): TestSetup {
  const setup = testConfig({ walletUsd: 100, models: mediaModels('up'), limits, ...extra });
  setup.options.upstreams = {
    test: { simulate: true, imageDelayMs: 0, videoDurationMs: 0, chunkDelayMs: 0 },
    up: { baseUrl: mediaUrl, apiKey: UPSTREAM_API_KEY, timeoutMs: 20_000 },
  };
  return setup;
}
