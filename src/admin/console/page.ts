/**
 * The console page (plain HTML and CSS; its script is script-core.ts and the parts beside it).
 *
 * The page asks the browser for no absolute path: the host app may mount the gateway under
 * any prefix (Express and Fastify strip theirs before the gateway sees the path, so the server
 * cannot know it), and an absolute "/admin/..." would then miss the gateway. Asset URLs are
 * relative to the page's <base>, which names the console's folder as seen from the page's own
 * URL (see consoleBase); the script's API calls are paths appended to the v1 folder resolved
 * from document.baseURI, so they land under the same prefix.
 */

/**
 * The <base href> for the page served at `sub` (the path after /admin): from ".../admin" the
 * console's folder is "admin/", from ".../admin/" or ".../admin/index.html" it is "./".
 * Relative, so it holds under whatever prefix is in front of /admin.
 */
export function consoleBase(sub: string): string {
  return sub === '' ? 'admin/' : './';
}

/** The page, with its assets and API resolved against `base` (one of consoleBase's answers). */
export function consoleHtml(base: string): string {
  return CONSOLE_HTML.replace('__BASE__', base);
}

const CONSOLE_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<base href="__BASE__">
<title>model-gateway console</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="uplot.css">
<style>
  body { font: 14px/1.4 system-ui, sans-serif; margin: 0; color: #1b1f24; background: #f6f7f9; }
  header { background: #1b1f24; color: #fff; padding: 10px 20px; display: flex; gap: 12px; align-items: center; flex-wrap: wrap; position: sticky; top: 0; z-index: 2; }
  header h1 { font-size: 16px; margin: 0; flex: 1; }
  main { padding: 16px 20px; display: grid; gap: 16px; grid-template-columns: 1fr 1fr; }
  section { background: #fff; border: 1px solid #dde1e6; border-radius: 6px; padding: 12px 16px; min-width: 0; }
  section.wide { grid-column: 1 / -1; }
  h2 { font-size: 15px; margin: 0 0 8px; }
  h3 { font-size: 13px; margin: 12px 0 6px; color: #4b5563; }
  table { border-collapse: collapse; width: 100%; }
  th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid #eef0f3; font-variant-numeric: tabular-nums; }
  .num { text-align: right; }
  .error, .bad { color: #b42318; }
  .good { color: #067647; }
  .big { font-size: 22px; font-weight: 600; }
  .cards { display: flex; gap: 32px; flex-wrap: wrap; margin-bottom: 8px; }
  .cols { display: grid; gap: 16px; grid-template-columns: 1fr 1fr; }
  .row { display: flex; gap: 8px; flex-wrap: wrap; align-items: center; margin: 6px 0; }
  #signin { max-width: 420px; margin: 80px auto; }
  #notice { position: fixed; bottom: 12px; left: 20px; right: 20px; background: #fee4e2; border: 1px solid #fda29b; padding: 8px 12px; border-radius: 6px; z-index: 3; }
  #accounts tbody tr { cursor: pointer; }
  #accounts tbody tr.selected { background: #eff4ff; font-weight: 600; }
  input, select, button { font: inherit; padding: 4px 8px; }
  input.cap { width: 6em; }
  td.limits .row { margin: 2px 0 0; }
  code.secret { background: #fff3c4; padding: 2px 4px; word-break: break-all; }
  .muted { color: #6b7280; }
  /* A wide table scrolls inside its own box; its cells (dates, ids, amounts) never wrap. */
  .scroll { overflow-x: auto; max-width: 100%; }
  .scroll th, .scroll td { white-space: nowrap; }
  .scroll td.wrap { white-space: normal; min-width: 16em; }
  /* A key's label, limits and buttons wrap, so at desktop width every button is in view. */
  #keys td { white-space: normal; }
  #keys td:first-child, #keys td:nth-child(2) { white-space: nowrap; }
  #keys td.limits, #keys td.actions { min-width: 12em; }
  #spend-chart { overflow: hidden; }
  .pager { display: flex; gap: 8px; align-items: center; margin-top: 6px; }
  #signin code { background: #eef0f3; padding: 1px 4px; }
  @media (max-width: 760px) {
    main, .cols { grid-template-columns: 1fr; }
    main { padding: 8px; gap: 8px; }
    section { padding: 8px 10px; }
    header { padding: 8px 10px; gap: 8px; position: static; }
    #signin { margin: 24px 8px; }
  }
</style>
</head>
<body>
<div id="signin" hidden>
  <section>
    <h2>Sign in</h2>
    <form id="signin-form">
      <p><label>Admin token <input id="token" type="password" autocomplete="current-password" size="40"></label></p>
      <p><button type="submit" id="signin-button">Sign in</button> <span id="signin-error" class="error"></span></p>
    </form>
    <p class="muted" id="signin-help">The admin token is the secret whose SHA-256 is <code>admin.tokenSha256</code> in the
      gateway's config: whoever set the gateway up chose it (the gateway keeps only the digest, so it cannot show it).
      With the example config, <code>model-gateway serve</code> (or <code>npm start</code>) prints a demo token on its
      start line.</p>
  </section>
</div>
<div id="app" hidden>
  <header>
    <h1>model-gateway console</h1>
    <label>From <input id="range-from" type="date"></label>
    <label>To <input id="range-to" type="date"></label>
    <button id="refresh">Refresh</button>
    <label><input id="auto-refresh" type="checkbox"> Auto-refresh (10 s)</label>
    <button id="signout">Sign out</button>
  </header>
  <main>
    <section class="wide" id="overview">
      <h2>All accounts <span class="muted" id="range-label"></span></h2>
      <div class="cards">
        <div>Spend <div><span id="ov-total" class="big">-</span> USD</div></div>
        <div>Calls <div id="ov-calls" class="big">-</div></div>
        <div>Accounts <div id="ov-accounts" class="big">-</div></div>
        <div><button id="export-all">Export ledger (CSV)</button></div>
      </div>
      <div id="spend-chart"></div>
      <div class="cols">
        <div><h3>Top accounts</h3><div class="scroll"><table id="top-accounts"><thead><tr><th>Account</th><th class="num">Calls</th><th class="num">USD</th></tr></thead><tbody></tbody></table></div></div>
        <div><h3>Top models</h3><div class="scroll"><table id="top-models"><thead><tr><th>Model</th><th class="num">Calls</th><th class="num">USD</th></tr></thead><tbody></tbody></table></div></div>
      </div>
    </section>

    <section id="accounts-panel">
      <h2>Accounts</h2>
      <div class="row"><input id="account-search" type="search" placeholder="Search by id" size="24"> <span id="accounts-count" class="muted"></span></div>
      <div class="scroll"><table id="accounts"><thead><tr><th>Account</th><th class="num">Balance USD</th><th class="num">Held USD</th><th>Budgets</th></tr></thead><tbody></tbody></table></div>
      <div class="row"><button id="accounts-prev">Previous</button><button id="accounts-next">Next</button></div>
      <h3>New account</h3>
      <form id="create-account-form" class="row">
        <input id="new-account-id" placeholder="account id" required size="16">
        <input id="new-account-wallet" placeholder="opening USD" size="8">
        <button type="submit" id="create-account">Create</button>
      </form>
    </section>

    <section id="account-view" hidden>
      <h2>Account <span id="account-name"></span></h2>
      <div>Balance <span id="balance" class="big">-</span> USD; held <span id="held">-</span> USD in <span id="holds">-</span> open holds</div>
      <form id="credit-form" class="row">
        <select id="credit-kind"><option value="credits">Top-up</option><option value="adjustments">Adjustment (signed)</option></select>
        <input id="credit-amount" placeholder="USD" size="8" required>
        <input id="credit-reason" placeholder="reason" size="18" required>
        <button type="submit" id="credit-submit">Apply</button>
      </form>
      <form id="grants-form" class="row">
        <label>Granted models <input id="grants" placeholder="model ids, comma separated" size="28" list="model-list"></label>
        <button type="submit" id="grants-save">Save grants</button>
      </form>
      <form id="budgets-form" class="row">
        <label>Budgets (all keys) <input id="account-budgets" placeholder="e.g. 5/day, 100/month" size="24"></label>
        <button type="submit" id="budgets-save">Save budgets</button>
      </form>
      <div>Spend in range <span id="total" class="big">-</span> USD <button id="export-account">Export CSV</button></div>
    </section>

    <section class="wide account-part" hidden>
      <h2>Keys</h2>
      <div id="new-secret"></div>
      <div class="scroll"><table id="keys"><thead><tr><th>Id</th><th>Prefix</th><th>Label</th><th>Kind</th><th class="num">Monthly cap</th><th>Status</th><th>Limits</th><th></th></tr></thead><tbody></tbody></table></div>
      <h3>New key</h3>
      <form id="create-key-form" class="row"></form>
    </section>
    <section class="account-part" hidden><h2>By model</h2><div class="scroll"><table id="by-model"><thead><tr><th>Model</th><th class="num">Calls</th><th class="num">USD</th></tr></thead><tbody></tbody></table></div></section>
    <section class="account-part" hidden><h2>By key</h2><div class="scroll"><table id="by-key"><thead><tr><th>Key</th><th>Label</th><th class="num">Calls</th><th class="num">USD</th></tr></thead><tbody></tbody></table></div></section>
    <section class="wide account-part" hidden><h2>Ledger <span class="muted">(in the date range, oldest first)</span></h2><div class="scroll"><table id="ledger"><thead><tr><th>Time</th><th>Id</th><th>Key</th><th>Model</th><th>Units</th><th class="num">USD</th></tr></thead><tbody></tbody></table></div>
      <div class="pager"><button id="ledger-prev">Previous</button><button id="ledger-next">Next</button><span id="ledger-page" class="muted"></span></div></section>
    <section class="wide account-part" hidden><h2>Jobs in progress</h2><div class="scroll"><table id="jobs"><thead><tr><th>Id</th><th>Kind</th><th>Model</th><th>Status</th><th class="num">Progress</th></tr></thead><tbody></tbody></table></div></section>
    <section class="wide account-part" hidden><h2>Batches</h2><div class="scroll"><table id="batches"><thead><tr><th>Id</th><th>Endpoint</th><th>Model</th><th>Status</th><th class="num">Done</th><th class="num">Failed</th><th class="num">Lines</th></tr></thead><tbody></tbody></table></div></section>

    <section class="wide"><h2>Recent requests <span class="muted">(this instance)</span></h2><div class="scroll"><table id="requests"><thead><tr><th>Time</th><th>Request id</th><th>Route</th><th>Status</th><th>Account</th><th>Key</th><th>Model</th><th class="num">ms</th><th class="num">USD</th></tr></thead><tbody></tbody></table></div>
      <div class="pager"><button id="requests-prev">Newer</button><button id="requests-next">Older</button><span id="requests-page" class="muted"></span></div></section>
    <section class="wide"><h2>Recent errors</h2><div class="scroll"><table id="errors"><thead><tr><th>Time</th><th>Request id</th><th>Route</th><th>Status</th><th>Code</th><th>Account</th><th>Model</th></tr></thead><tbody></tbody></table></div></section>
    <section><h2>Latency and errors per model</h2><div class="scroll"><table id="model-stats"><thead><tr><th>Model</th><th class="num">Calls</th><th class="num">p50 ms</th><th class="num">p95 ms</th><th class="num">Error rate</th><th class="num">Refused</th></tr></thead><tbody></tbody></table></div></section>
    <section><h2>Response cache <span class="muted">(this instance)</span></h2><div class="scroll"><table id="cache-stats"><thead><tr><th>Account</th><th>Model</th><th class="num">Hits</th><th class="num">Hit rate</th><th class="num">Saved USD</th></tr></thead><tbody></tbody></table></div></section>
    <section><h2>Upstreams</h2><div class="scroll"><table id="upstreams"><thead><tr><th>Upstream</th><th>Circuit</th><th class="num">Failures</th><th>Models</th></tr></thead><tbody></tbody></table></div></section>
    <section class="wide" id="audit-panel"><h2>Audit</h2>
      <p class="muted">Checks every account's books: balance against the ledger, held against the open holds, each key's month against its charges, one charge per hold.</p>
      <div class="row"><button id="run-audit">Run audit</button> <span id="audit-result"></span></div>
      <div class="scroll"><table id="audit" hidden><thead><tr><th>Account</th><th>Check</th><th>Key or hold</th><th class="num">Expected</th><th class="num">Actual</th></tr></thead><tbody></tbody></table></div>
    </section>
    <section class="wide"><h2>Recent guardrail blocks <span class="muted">(this instance)</span></h2><div class="scroll"><table id="guardrail-blocks"><thead><tr><th>Time</th><th>Guardrail</th><th>On</th><th>Request id</th><th>Account</th><th>Model</th><th>Path</th></tr></thead><tbody></tbody></table></div></section>
    <section class="wide"><h2>Recent admin changes</h2><div class="scroll"><table id="changes"><thead><tr><th>Time</th><th>Who</th><th>Change</th><th>Target</th><th>Details</th></tr></thead><tbody></tbody></table></div></section>
  </main>
  <datalist id="model-list"></datalist>
  <div id="notice" hidden></div>
</div>
<script src="uplot.js"></script>
<script src="console.js"></script>
</body>
</html>
`;
