/**
 * Which media tier a request is billed at: the highest-priced tier implied by any field that
 * sets what is rendered (`mode` on models with named modes, `resolution`, `size` "WxH" by its
 * shorter side, and `quality` where the model prices it), else the model's default tier (its
 * `from` price). Taking the highest means no field can make the upstream render more than was
 * paid for: `resolution: "480P"` beside `size: "1920x1080"` is billed at 1080P. A field naming
 * a tier the model does not price is 400 with `param` naming it.
 */
import type { Model } from '../catalog/catalog.js';
import { GatewayError } from '../errors.js';

export const RESOLUTIONS = ['480P', '720P', '1080P', '4K'] as const;

export interface TierChoice {
  tier: string;
  pricePico: bigint;
}

export interface TierFields {
  mode?: unknown;
  resolution?: unknown;
  size?: unknown;
  quality?: unknown;
}

/** Every field `chooseTier` reads: each sets the price, so a request must carry it as text. */
export const TIER_FIELDS: ReadonlyArray<keyof TierFields> = ['mode', 'resolution', 'size', 'quality'];

/** "1280x720" -> "720P" by the shorter side; null when `size` is not "WxH" of two positive sides. */
export function tierOfSize(size: string): string | null {
  const m = /^(\d{1,5})x(\d{1,5})$/.exec(size);
  if (!m) return null;
  const shorter = Math.min(Number(m[1]), Number(m[2]));
  // "0x0" renders nothing any upstream would take: refused, not priced as the smallest tier.
  if (shorter === 0) return null;
  if (shorter <= 480) return '480P';
  if (shorter <= 720) return '720P';
  if (shorter <= 1080) return '1080P';
  return '4K';
}

export function chooseTier(model: Model, fields: TierFields): TierChoice {
  const media = model.media!;
  const priced = (param: string, tier: string): TierChoice => {
    const price = media.tiers.get(tier);
    if (price === undefined) {
      const known = [...media.tiers.keys()].join(', ') || 'none';
      throw new GatewayError('invalid_request', `The model \`${model.id}\` has no price for ${param} "${tier}" (priced: ${known}).`, {
        param,
      });
    }
    return { tier, pricePico: price };
  };
  const implied: TierChoice[] = [];
  const given = (v: unknown) => v !== undefined && v !== null;
  if (given(fields.mode)) {
    if (typeof fields.mode !== 'string' || !media.modes.has(fields.mode)) {
      throw new GatewayError('invalid_request', `The model \`${model.id}\` has no mode ${JSON.stringify(fields.mode)}.`, {
        param: 'mode',
      });
    }
    implied.push(priced('mode', fields.mode));
  }
  if (given(fields.resolution)) {
    if (typeof fields.resolution !== 'string' || !(RESOLUTIONS as readonly string[]).includes(fields.resolution)) {
      throw new GatewayError('invalid_request', "Invalid value for 'resolution': expected one of 480P, 720P, 1080P, 4K.", {
        param: 'resolution',
      });
    }
    implied.push(priced('resolution', fields.resolution));
  }
  if (given(fields.size) && fields.size !== 'auto') {
    const tier = typeof fields.size === 'string' ? tierOfSize(fields.size) : null;
    if (!tier) {
      throw new GatewayError('invalid_request', "Invalid value for 'size': expected \"WIDTHxHEIGHT\", e.g. \"1024x1024\".", {
        param: 'size',
      });
    }
    // A model priced without tiers bills every size at its `from` price.
    implied.push(media.tiers.size === 0 ? { tier: media.defaultTier, pricePico: media.fromPico } : priced('size', tier));
  }
  // Quality changes the price only on models that price it as a tier ("hd", "high", ...).
  if (typeof fields.quality === 'string' && media.tiers.has(fields.quality)) implied.push(priced('quality', fields.quality));

  let best: TierChoice | undefined;
  for (const choice of implied) if (!best || choice.pricePico > best.pricePico) best = choice;
  return best ?? { tier: media.defaultTier, pricePico: media.tiers.get(media.defaultTier) ?? media.fromPico };
}
