/**
 * Media routes of the built-in simulator. Filled in by the media work; until then the
 * simulator answers media paths with 404 like any unknown route.
 */
import type { Tokenizer } from '../billing/tokens.js';
import type { UpstreamCall, UpstreamResponse } from './client.js';

export interface MediaSimulatorOptions {
  imageDelayMs: number;
  videoDurationMs: number;
}

export interface MediaSimulator {
  handle(call: UpstreamCall): Promise<UpstreamResponse | null>;
  close(): void;
}

export function createMediaSimulator(_opts: MediaSimulatorOptions, _tokenizer: Tokenizer): MediaSimulator {
  return {
    async handle() {
      return null;
    },
    close() {},
  };
}
