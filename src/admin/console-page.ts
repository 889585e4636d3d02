/**
 * The console page and its script (plain browser JavaScript, no build step).
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
<link rel="stylesheet" href="uplot.css">
<style>
  body { font: 14px/1.4 system-ui, sans-serif; margin: 0; color: #1b1f24; background: #f6f7f9; }
  header { background: #1b1f24; color: #fff; padding: 10px 20px; display: flex; gap: 16px; align-items: center; }
  header h1 { font-size: 16px; margin: 0; flex: 1; }
  main { padding: 16px 20px; display: grid; gap: 16px; grid-template-columns: 1fr 1fr; }
  section { background: #fff; border: 1px solid #dde1e6; border-radius: 6px; padding: 12px 16px; }
  section.wide { grid-column: 1 / -1; }
  h2 { font-size: 14px; margin: 0 0 8px; }
  table { border-collapse: collapse; width: 100%; }
  th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid #eef0f3; font-variant-numeric: tabular-nums; }
  .num { text-align: right; }
  .error { color: #b42318; }
  .big { font-size: 22px; font-weight: 600; }
  #signin { max-width: 420px; margin: 80px auto; }
  input, select, button { font: inherit; padding: 4px 8px; }
  code.secret { background: #fff3c4; padding: 2px 4px; word-break: break-all; }
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
  </section>
</div>
<div id="app" hidden>
  <header>
    <h1>model-gateway console</h1>
    <label>Account <select id="account"></select></label>
    <button id="refresh">Refresh</button>
    <button id="signout">Sign out</button>
  </header>
  <main>
    <section><h2>Wallet</h2><div>Balance <span id="balance" class="big">-</span> USD</div><div>Held <span id="held">-</span> USD in <span id="holds">-</span> open holds</div></section>
    <section><h2>Spend, last 30 days</h2><div id="total" class="big">-</div></section>
    <section class="wide"><h2>Spend per day (USD)</h2><div id="spend-chart"></div></section>
    <section><h2>By model</h2><table id="by-model"><thead><tr><th>Model</th><th class="num">Calls</th><th class="num">USD</th></tr></thead><tbody></tbody></table></section>
    <section><h2>By key</h2><table id="by-key"><thead><tr><th>Key</th><th class="num">Calls</th><th class="num">USD</th></tr></thead><tbody></tbody></table></section>
    <section class="wide"><h2>Keys</h2><div id="new-secret"></div><table id="keys"><thead><tr><th>Id</th><th>Prefix</th><th>Label</th><th>Kind</th><th class="num">Monthly cap</th><th>Status</th><th></th></tr></thead><tbody></tbody></table></section>
    <section class="wide"><h2>Latest ledger entries</h2><table id="ledger"><thead><tr><th>Time</th><th>Id</th><th>Key</th><th>Model</th><th>Units</th><th class="num">USD</th></tr></thead><tbody></tbody></table></section>
    <section class="wide"><h2>Jobs in progress</h2><table id="jobs"><thead><tr><th>Id</th><th>Kind</th><th>Model</th><th>Status</th><th class="num">Progress</th></tr></thead><tbody></tbody></table></section>
  </main>
</div>
<script src="uplot.js"></script>
<script src="console.js"></script>
</body>
</html>
`;

export const CONSOLE_JS = `'use strict';
(function () {
  // The API is the folder v1/ next to the page's assets, under whatever prefix the page has.
  var API = new URL('v1', document.baseURI).href;
  var $ = function (id) { return document.getElementById(id); };
  var chart = null;

  function token() { return sessionStorage.getItem('mg-admin-token'); }

  function api(method, path, body) {
    var init = { method: method, headers: { authorization: 'Bearer ' + token() } };
    if (body !== undefined) { init.headers['content-type'] = 'application/json'; init.body = JSON.stringify(body); }
    return fetch(API + path, init).then(function (res) {
      return res.json().then(function (data) {
        if (res.status === 401) { signOut(); throw new Error('signed out'); }
        if (!res.ok) throw new Error((data && data.error && data.error.message) || ('HTTP ' + res.status));
        return data;
      });
    });
  }

  function cell(tr, text, cls) {
    var td = document.createElement('td');
    td.textContent = text === null || text === undefined ? '' : String(text);
    if (cls) td.className = cls;
    tr.appendChild(td);
    return td;
  }

  function fill(tableId, rows, render) {
    var body = $(tableId).tBodies[0];
    body.textContent = '';
    rows.forEach(function (r) { var tr = document.createElement('tr'); render(tr, r); body.appendChild(tr); });
  }

  function showSignIn(message) {
    $('app').hidden = true;
    $('signin').hidden = false;
    $('signin-error').textContent = message || '';
  }

  function signOut() { sessionStorage.removeItem('mg-admin-token'); showSignIn(''); }

  function units(u) {
    if (u.kind === 'tokens') return u.prompt + ' + ' + u.completion + ' tokens';
    if (u.kind === 'images') return u.images + ' images (' + u.tier + ')';
    if (u.kind === 'seconds') return u.seconds + ' s (' + u.tier + ')';
    if (u.kind === 'speech_tokens') return u.tokens + ' speech tokens';
    if (u.kind === 'credit') return 'credit: ' + u.reason;
    return u.kind;
  }

  function drawChart(rows) {
    var byDay = {};
    rows.forEach(function (r) { byDay[r.group] = Number(r.costUsd); });
    var xs = [], ys = [];
    var start = Date.UTC(new Date().getUTCFullYear(), new Date().getUTCMonth(), new Date().getUTCDate()) - 29 * 86400000;
    for (var i = 0; i < 30; i++) {
      var t = start + i * 86400000;
      xs.push(t / 1000);
      ys.push(byDay[new Date(t).toISOString().slice(0, 10)] || 0);
    }
    var el = $('spend-chart');
    if (chart) chart.destroy();
    chart = new uPlot({
      width: Math.max(300, el.clientWidth || 800),
      height: 240,
      scales: { x: { time: true } },
      series: [{}, { label: 'USD', stroke: '#2563eb', fill: 'rgba(37,99,235,0.25)', width: 2, paths: uPlot.paths.bars({ size: [0.6, 40] }) }],
      axes: [{}, { size: 80, values: function (u, vals) { return vals.map(function (v) { return '$' + v; }); } }],
    }, [xs, ys], el);
    el.dataset.points = String(ys.filter(function (y) { return y > 0; }).length);
  }

  function loadAccount(account) {
    var q = '?account=' + encodeURIComponent(account);
    var from = new Date(Date.now() - 29 * 86400000).toISOString().slice(0, 10);
    return Promise.all([
      api('GET', '/accounts/' + encodeURIComponent(account)),
      api('GET', '/usage' + q + '&group_by=day&from=' + from),
      api('GET', '/usage' + q + '&group_by=model&from=' + from),
      api('GET', '/usage' + q + '&group_by=key&from=' + from),
      api('GET', '/keys' + q),
      latestLedger(account),
      api('GET', '/jobs' + q),
    ]).then(function (r) {
      $('balance').textContent = r[0].balanceUsd;
      $('held').textContent = r[0].heldUsd;
      $('holds').textContent = r[0].openHolds;
      $('total').textContent = r[1].totalUsd + ' USD';
      drawChart(r[1].data);
      fill('by-model', r[2].data, function (tr, x) { cell(tr, x.group); cell(tr, x.calls, 'num'); cell(tr, x.costUsd, 'num'); });
      fill('by-key', r[3].data, function (tr, x) { cell(tr, x.group); cell(tr, x.calls, 'num'); cell(tr, x.costUsd, 'num'); });
      fill('keys', r[4].data, function (tr, k) {
        tr.dataset.key = k.id;
        cell(tr, k.id); cell(tr, k.prefix); cell(tr, k.label); cell(tr, k.kind + (k.model ? ' (' + k.model + ')' : ''));
        cell(tr, k.monthlyCapUsd, 'num'); cell(tr, k.disabled ? 'disabled' : 'active');
        var td = cell(tr, '');
        var toggle = document.createElement('button');
        toggle.textContent = k.disabled ? 'Enable' : 'Disable';
        toggle.className = k.disabled ? 'enable' : 'disable';
        toggle.onclick = function () { act('POST', '/keys/' + encodeURIComponent(k.id) + (k.disabled ? '/enable' : '/disable')); };
        var rotate = document.createElement('button');
        rotate.textContent = 'Rotate';
        rotate.className = 'rotate';
        rotate.onclick = function () {
          if (!confirm('Rotate ' + k.id + '? The current secret stops working.')) return;
          act('POST', '/keys/' + encodeURIComponent(k.id) + '/rotate', function (res) {
            var box = $('new-secret');
            box.textContent = 'New secret for ' + res.id + ' (shown once): ';
            var code = document.createElement('code'); code.className = 'secret'; code.textContent = res.key; box.appendChild(code);
          });
        };
        td.appendChild(toggle); td.appendChild(document.createTextNode(' ')); td.appendChild(rotate);
      });
      fill('ledger', r[5], function (tr, e) {
        cell(tr, new Date(e.at).toISOString().replace('T', ' ').slice(0, 19)); cell(tr, e.id); cell(tr, e.key); cell(tr, e.model);
        cell(tr, units(e.units)); cell(tr, e.costUsd, 'num');
      });
      fill('jobs', r[6].data, function (tr, j) { cell(tr, j.id); cell(tr, j.object); cell(tr, j.model); cell(tr, j.status); cell(tr, j.progress, 'num'); });
      document.body.dataset.loaded = String(Date.now());
    });
  }

  /** The last 20 entries: pages run oldest first, so read to the end (bounded). */
  function latestLedger(account) {
    var kept = [];
    function page(cursor, n) {
      var q = '/ledger?limit=1000&account=' + encodeURIComponent(account) + (cursor ? '&cursor=' + cursor : '');
      return api('GET', q).then(function (p) {
        kept = kept.concat(p.data).slice(-20);
        return p.more && n < 50 ? page(p.nextCursor, n + 1) : kept.reverse();
      });
    }
    return page(null, 0);
  }

  function act(method, path, then) {
    api(method, path).then(function (res) { if (then) then(res); return loadAccount($('account').value); })
      .catch(function (err) { alert(err.message); });
  }

  function start() {
    return api('GET', '/accounts').then(function (list) {
      $('signin').hidden = true;
      $('app').hidden = false;
      var sel = $('account');
      sel.textContent = '';
      list.data.forEach(function (a) { var o = document.createElement('option'); o.value = a.id; o.textContent = a.id; sel.appendChild(o); });
      if (list.data.length) return loadAccount(sel.value);
    });
  }

  $('signin-form').addEventListener('submit', function (ev) {
    ev.preventDefault();
    sessionStorage.setItem('mg-admin-token', $('token').value);
    $('token').value = '';
    start().catch(function (err) { showSignIn(err.message === 'signed out' ? 'That token was not accepted.' : err.message); });
  });
  $('account').addEventListener('change', function () { loadAccount($('account').value); });
  $('refresh').addEventListener('click', function () { loadAccount($('account').value); });
  $('signout').addEventListener('click', signOut);

  if (token()) start().catch(function () { showSignIn(''); }); else showSignIn('');
})();
`;
