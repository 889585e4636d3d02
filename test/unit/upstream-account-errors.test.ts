import { describe, expect, it } from 'vitest';
import { upstreamErrorOf } from '../../src/upstream/answer-errors.js';

const same = (t: string) => t;
const body = (error: unknown) => JSON.stringify({ type: 'error', error });

describe("a provider's refusal about the gateway's own account is the upstream's failure (502), never the client's 400", () => {
  it.each([
    ['Gemini: a bad key (400 INVALID_ARGUMENT, reason API_KEY_INVALID)', 400, { code: 400, status: 'INVALID_ARGUMENT', message: 'API key not valid. Please pass a valid API key.', details: [{ '@type': 'type.googleapis.com/google.rpc.ErrorInfo', reason: 'API_KEY_INVALID' }] }],
    ['Gemini: an expired key', 400, { code: 400, status: 'INVALID_ARGUMENT', message: 'API key expired. Please renew the API key.', details: [{ reason: 'API_KEY_EXPIRED' }] }],
    ["Anthropic: a low credit balance (a 400 invalid_request_error)", 400, { type: 'invalid_request_error', message: 'Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits.' }],
    ['Anthropic: a billing error by type', 400, { type: 'billing_error', message: 'billing' }],
    ['OpenAI: out of credit (429 insufficient_quota)', 429, { type: 'insufficient_quota', code: 'insufficient_quota', message: 'You exceeded your current quota.' }],
  ])('%s', (_name, status, error) => {
    const err = upstreamErrorOf(status, body(error), 'up', same);
    expect(err.status).toBe(502);
    expect(err.code).toBe('upstream_error');
    // The provider's words about our key or credit stay in the log only.
    expect(err.message).not.toMatch(/key|credit|quota/i);
    expect(err.upstreamMessage).toContain((error as { message: string }).message.slice(0, 20));
  });

  it('also when the body is plain text, or the error comes in a list', () => {
    const text = upstreamErrorOf(400, 'Your credit balance is too low to access the Anthropic API.', 'up', same);
    expect(text.status).toBe(502);
    const listed = upstreamErrorOf(400, JSON.stringify([{ error: { code: 400, status: 'INVALID_ARGUMENT', message: 'API key not valid. Please pass a valid API key.', details: [{ reason: 'API_KEY_INVALID' }] } }]), 'gem', same);
    expect(listed.status).toBe(502);
    expect(listed.message).not.toMatch(/key/i);
  });

  it("a refusal of the client's request keeps the provider's words and status", () => {
    const err = upstreamErrorOf(400, body({ type: 'invalid_request_error', message: 'messages: roles must alternate' }), 'up', same);
    expect(err.status).toBe(400);
    expect(err.message).toBe('messages: roles must alternate');
    const gemini = upstreamErrorOf(400, JSON.stringify({ error: { code: 400, status: 'INVALID_ARGUMENT', message: 'Invalid JSON payload received.', details: [{ reason: 'BAD_FIELD' }] } }), 'gem', same);
    expect(gemini.status).toBe(400);
    expect(gemini.message).toBe('Invalid JSON payload received.');
  });
});
