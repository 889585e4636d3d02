/**
 * What a process holds before its first upstream call: undici (the largest library the
 * gateway uses) loads with the first call to an HTTP upstream, not at start. A child process
 * is needed: this test runner has undici loaded already.
 */
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = join(import.meta.dirname, '..', '..');

const SCRIPT = `
import { createServer } from 'node:http';
import { createRequire } from 'node:module';
import { MODEL, makeGateway, testConfig } from './test/helpers/gateway.ts';
const loaded = () => Object.keys(createRequire(import.meta.url).cache).some((k) => k.includes('/node_modules/undici/'));
const upstream = createServer((req, res) => {
  req.resume();
  req.on('end', () => {
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify({ id: 'c1', object: 'chat.completion', created: 1, model: 'm', choices: [{ index: 0, message: { role: 'assistant', content: 'hi' }, finish_reason: 'stop' }], usage: { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 } }));
  });
});
await new Promise((r) => upstream.listen(0, '127.0.0.1', r));
const setup = testConfig({ upstreamUrl: 'http://127.0.0.1:' + upstream.address().port + '/v1' });
const { gateway } = await makeGateway(setup.options);
const before = loaded();
const res = await gateway.fetch(new Request('http://gw/v1/chat/completions', {
  method: 'POST',
  headers: { authorization: 'Bearer ' + setup.devKey, 'content-type': 'application/json' },
  body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hello' }], max_tokens: 5 }),
}));
const body = await res.json();
console.log(JSON.stringify({ before, after: loaded(), status: res.status, content: body.choices?.[0]?.message?.content ?? body }));
await gateway.dispose();
upstream.close();
`;

describe('cold start', () => {
  it('loads undici with the first call to an HTTP upstream, and that call is answered', async () => {
    const out = await new Promise<string>((resolve, reject) => {
      execFile(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', SCRIPT], { cwd: ROOT, timeout: 60_000 }, (err, stdout, stderr) =>
        err ? reject(new Error(`${err.message}\n${stderr}`)) : resolve(stdout),
      );
    });
    const line = out.trim().split('\n').at(-1)!;
    expect(JSON.parse(line)).toEqual({ before: false, after: true, status: 200, content: 'hi' });
  });
});
