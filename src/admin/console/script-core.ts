/**
 * The console script's core (plain browser JavaScript, no build step): signing in, calling the
 * admin API, the date range, the overview of all accounts and the searchable, paged account
 * list. The account view (script-account.ts) and this instance's operations (script-ops.ts)
 * run in the same function scope: assets.ts joins the three into one console.js.
 *
 * Every change the console makes is an admin API call (`change`), so each is checked, applied
 * and logged by the API like any other. The API is the folder v1/ next to the page's assets,
 * resolved from document.baseURI: relative, so it lands under whatever prefix the page has.
 */
export const SCRIPT_CORE = `
  var API = new URL('v1', document.baseURI).href;
  var $ = function (id) { return document.getElementById(id); };
  var DAY = 86400000;
  var PAGE = 20;
  var chart = null;
  /** The selected account, and the account list's search and paging (cursors of earlier pages). */
  var state = { account: null, search: '', cursor: null, earlier: [], next: null };

  function token() { return sessionStorage.getItem('mg-admin-token'); }
  function enc(s) { return encodeURIComponent(s); }
  function isoDay(t) { return new Date(t).toISOString().slice(0, 10); }
  function shortTime(iso) { return String(iso).replace('T', ' ').slice(0, 19); }

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

  function notice(message) { $('notice').textContent = message || ''; $('notice').hidden = !message; }

  /**
   * Makes a change through the admin API, then shows everything afresh; a refusal is shown.
   * With \`form\`, its buttons are disabled until the answer: a second click or Enter while
   * the call runs does not send it again.
   */
  function change(method, path, body, then, form) {
    notice('');
    var buttons = form ? form.querySelectorAll('button') : [];
    Array.prototype.forEach.call(buttons, function (b) { b.disabled = true; });
    var done = function () { Array.prototype.forEach.call(buttons, function (b) { b.disabled = false; }); };
    return api(method, path, body)
      .then(function (res) { if (then) then(res); return refresh(); })
      .catch(function (err) { notice(err.message); })
      .then(done, done);
  }

  /** A random id (crypto.getRandomValues works on a plain-http page; randomUUID does not). */
  function randomId(prefix) {
    var bytes = crypto.getRandomValues(new Uint8Array(12));
    return prefix + Array.prototype.map.call(bytes, function (b) { return (b + 256).toString(16).slice(1); }).join('');
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

  function button(text, cls, onclick) {
    var b = document.createElement('button');
    b.type = 'button'; b.textContent = text; b.className = cls; b.onclick = onclick;
    return b;
  }

  function showSignIn(message) {
    $('app').hidden = true;
    $('signin').hidden = false;
    $('signin-error').textContent = message || '';
  }

  function signOut() { sessionStorage.removeItem('mg-admin-token'); clearInterval(auto.timer); clearSecret(); showSignIn(''); }

  /** The date range as query parameters: from its first day to the end of its last (UTC). */
  function range() {
    var from = $('range-from').value, to = $('range-to').value, q = '';
    if (from) q += '&from=' + from;
    if (to) q += '&to=' + isoDay(Date.parse(to + 'T00:00:00Z') + DAY);
    return q;
  }

  /** The chart's last data, drawn again to the new width when the window is resized. */
  var chartDays = null;
  function drawChart(days) {
    chartDays = days;
    var byDay = {};
    days.forEach(function (r) { byDay[r.group] = Number(r.costUsd); });
    var today = Date.parse(isoDay(Date.now()) + 'T00:00:00Z');
    var start = $('range-from').value ? Date.parse($('range-from').value + 'T00:00:00Z') : (days.length ? Date.parse(days[0].group + 'T00:00:00Z') : today);
    var end = $('range-to').value ? Date.parse($('range-to').value + 'T00:00:00Z') : today;
    var xs = [], ys = [];
    for (var t = start; t <= end && xs.length < 400; t += DAY) { xs.push(t / 1000); ys.push(byDay[isoDay(t)] || 0); }
    var el = $('spend-chart');
    if (chart) chart.destroy();
    chart = new uPlot({
      width: Math.max(240, el.clientWidth || 800),
      height: 220,
      scales: { x: { time: true } },
      series: [{}, { label: 'USD per day', stroke: '#2563eb', fill: 'rgba(37,99,235,0.25)', width: 2, paths: uPlot.paths.bars({ size: [0.6, 40] }) }],
      axes: [{}, { size: 64, values: function (u, vals) { return vals.map(function (v) { return '$' + v; }); } }],
    }, [xs, ys], el);
    el.dataset.points = String(ys.filter(function (y) { return y > 0; }).length);
  }

  function spendRow(tr, r) { cell(tr, r.group); cell(tr, r.calls, 'num'); moneyCell(tr, r.costUsd); }

  function loadOverview() {
    return api('GET', '/overview?top=10' + range()).then(function (o) {
      setMoney('ov-total', o.totalUsd);
      $('ov-calls').textContent = o.calls;
      $('ov-accounts').textContent = o.accounts;
      $('range-label').textContent = ($('range-from').value || 'all time') + ' to ' + ($('range-to').value || 'now') + (o.truncated ? ' (truncated)' : '');
      drawChart(o.days);
      fill('top-accounts', o.topAccounts, function (tr, r) {
        tr.dataset.account = r.group; spendRow(tr, r);
        tr.onclick = function () { selectAccount(r.group); };
      });
      fill('top-models', o.topModels, spendRow);
    });
  }

  function loadAccounts() {
    var q = '/accounts?limit=' + PAGE + (state.search ? '&search=' + enc(state.search) : '') + (state.cursor ? '&cursor=' + enc(state.cursor) : '');
    return api('GET', q).then(function (list) {
      $('accounts-count').textContent = list.total + (list.total === 1 ? ' account' : ' accounts');
      fill('accounts', list.data, function (tr, a) {
        tr.dataset.account = a.id;
        if (a.id === state.account) tr.className = 'selected';
        cell(tr, a.id); moneyCell(tr, a.balanceUsd); moneyCell(tr, a.heldUsd); cell(tr, budgetsText(a.budgets));
        tr.onclick = function () { selectAccount(a.id); };
      });
      state.next = list.more ? list.nextCursor : null;
      $('accounts-next').disabled = !list.more;
      $('accounts-prev').disabled = state.earlier.length === 0;
      return list;
    });
  }

  function searchAccounts() {
    state.search = $('account-search').value.trim();
    state.cursor = null;
    state.earlier = [];
    return loadAccounts().catch(function (err) { notice(err.message); });
  }

  /** Shows everything afresh: the overview, the account list and view, and this instance's operations. */
  function refresh() {
    return Promise.all([loadOverview(), loadAccounts(), state.account ? loadAccount() : null, loadOps()]).then(function () {
      document.body.dataset.loaded = String(Date.now());
    });
  }

  function start() {
    return api('GET', '/accounts?limit=1').then(function (first) {
      $('signin').hidden = true;
      $('app').hidden = false;
      if (!$('range-from').value) $('range-from').value = isoDay(Date.now() - 29 * DAY);
      if (!state.account && first.data.length) state.account = first.data[0].id;
      buildKeyForm();
      setAutoRefresh(sessionStorage.getItem('mg-auto-refresh') === '1');
      return refresh();
    });
  }

  var searchTimer = null;
  $('account-search').addEventListener('input', function () { clearTimeout(searchTimer); searchTimer = setTimeout(searchAccounts, 250); });
  $('accounts-next').addEventListener('click', function () { state.earlier.push(state.cursor); state.cursor = state.next; loadAccounts(); });
  $('accounts-prev').addEventListener('click', function () { state.cursor = state.earlier.pop() || null; loadAccounts(); });
  function rangeChanged() { ledgerPages.reset(); refresh().catch(function (err) { notice(err.message); }); }
  $('range-from').addEventListener('change', rangeChanged);
  $('range-to').addEventListener('change', rangeChanged);
  var resizeTimer = null;
  window.addEventListener('resize', function () {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(function () { if (chartDays) drawChart(chartDays); }, 150);
  });
  $('refresh').addEventListener('click', function () { refresh().catch(function (err) { notice(err.message); }); });
  $('signout').addEventListener('click', signOut);
  $('signin-form').addEventListener('submit', function (ev) {
    ev.preventDefault();
    sessionStorage.setItem('mg-admin-token', $('token').value);
    $('token').value = '';
    start().catch(function (err) { showSignIn(err.message === 'signed out' ? 'That token was not accepted.' : err.message); });
  });
`;
