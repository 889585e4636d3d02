/**
 * The web console's assets: one page and one script (page.ts, script-*.ts), kept as strings so they ship inside
 * the built package with no build step at run time; the chart library (uPlot) is read from
 * node_modules, where it is a dependency. The page talks only to the admin API next to it
 * (…/admin/v1, under whatever prefix the gateway is mounted at) with the token the operator
 * signs in with (kept in sessionStorage, never sent anywhere else).
 */
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { Response } from '@whatwg-node/server';
import { consoleBase, consoleHtml } from './page.js';
import { SCRIPT_ACCOUNT } from './script-account.js';
import { SCRIPT_CORE } from './script-core.js';
import { SCRIPT_LIMITS } from './script-limits.js';
import { SCRIPT_OPS } from './script-ops.js';
import { SCRIPT_PAGES } from './script-pages.js';

/** The console's script: its parts share one function scope; signing in (or the kept token) starts it. */
const CONSOLE_JS = `'use strict';
(function () {
${SCRIPT_CORE}${SCRIPT_PAGES}${SCRIPT_LIMITS}${SCRIPT_ACCOUNT}${SCRIPT_OPS}
  if (token()) start().catch(function () { showSignIn(''); }); else showSignIn('');
})();
`;

const cache = new Map<string, string>();

async function vendor(file: string): Promise<string> {
  let text = cache.get(file);
  if (text === undefined) {
    const require = createRequire(import.meta.url);
    // Resolved at run time from the installed package. Next.js (Turbopack) bundles a package
    // left out of serverExternalPackages and would turn this resolve into a module id; the
    // comment keeps it a plain resolve there.
    text = await readFile(require.resolve(/* turbopackIgnore: true */ `uplot/dist/${file}`), 'utf8');
    cache.set(file, text);
  }
  return text;
}

const headers = (type: string) => ({
  'content-type': type,
  'cache-control': 'no-cache',
  // The console runs only its own scripts and talks only to its own origin; its <base> may
  // name only its own origin, so an injected <base> cannot send the token elsewhere.
  'content-security-policy':
    "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; base-uri 'self'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
});

/**
 * The asset at `sub` (the path after /admin: "" for /admin itself), or null. The page is the
 * same at "", "/" and "/index.html" but for its <base>, which depends on which was asked.
 */
export async function consoleAsset(sub: string): Promise<Response | null> {
  switch (sub) {
    case '':
    case '/':
    case '/index.html':
      return new Response(consoleHtml(consoleBase(sub)), { headers: headers('text/html; charset=utf-8') });
    case '/console.js':
      return new Response(CONSOLE_JS, { headers: headers('text/javascript; charset=utf-8') });
    case '/uplot.js':
      return new Response(await vendor('uPlot.iife.min.js'), { headers: headers('text/javascript; charset=utf-8') });
    case '/uplot.css':
      return new Response(await vendor('uPlot.min.css'), { headers: headers('text/css; charset=utf-8') });
    default:
      return null;
  }
}
