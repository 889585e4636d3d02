/**
 * Which media tier a request is billed at (SPEC section 5, "Media tiers"):
 * `mode` (models with named modes) > `resolution` > `size` "WxH" by its shorter side >
 * the model's default tier (its `from` price). A tier the model does not price is 400.
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
}

/** "1280x720" -> "720P" by the shorter side; null when `size` is not "WxH". */
export function tierOfSize(size: string): string | null {
  const m = /^(\d{1,5})x(\d{1,5})$/.exec(size);
  if (!m) return null;
  const shorter = Math.min(Number(m[1]), Number(m[2]));
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
  if (fields.mode !== undefined && fields.mode !== null) {
    if (typeof fields.mode !== 'string' || !media.modes.has(fields.mode)) {
      throw new GatewayError('invalid_request', `The model \`${model.id}\` has no mode ${JSON.stringify(fields.mode)}.`, {
        param: 'mode',
      });
    }
    return priced('mode', fields.mode);
  }
  if (fields.resolution !== undefined && fields.resolution !== null) {
    if (typeof fields.resolution !== 'string' || !(RESOLUTIONS as readonly string[]).includes(fields.resolution)) {
      throw new GatewayError('invalid_request', "Invalid value for 'resolution': expected one of 480P, 720P, 1080P, 4K.", {
        param: 'resolution',
      });
    }
    return priced('resolution', fields.resolution);
  }
  if (fields.size !== undefined && fields.size !== null && fields.size !== 'auto') {
    const tier = typeof fields.size === 'string' ? tierOfSize(fields.size) : null;
    if (!tier) {
      throw new GatewayError('invalid_request', "Invalid value for 'size': expected \"WIDTHxHEIGHT\", e.g. \"1024x1024\".", {
        param: 'size',
      });
    }
    // A model priced without tiers bills every size at its `from` price.
    if (media.tiers.size === 0) return { tier: media.defaultTier, pricePico: media.fromPico };
    return priced('size', tier);
  }
  return { tier: media.defaultTier, pricePico: media.tiers.get(media.defaultTier) ?? media.fromPico };
}
