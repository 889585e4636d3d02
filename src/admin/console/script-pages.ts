/**
 * The console script's shared views (runs in the core's scope, see script-core.ts): money
 * shown to the cent with the exact figure on hover, tables paged by cursor, the audit, and
 * auto-refresh.
 *
 * Money arrives as exact decimal strings (nano-USD precision). It is rounded for the eye only,
 * with BigInt on the string's digits (never a float), and the cell's title keeps the exact
 * figure. An amount that rounds to zero but is not zero reads "<0.01", never a false "0.00".
 */
export const SCRIPT_PAGES = `
  /** An exact USD decimal string rounded half up to cents, with thousands separators. */
  function cents(v) {
    if (v === null || v === undefined || v === '') return '';
    var m = /^(-?)(\\d+)(?:\\.(\\d*))?$/.exec(String(v));
    if (!m) return String(v);
    var frac = (m[3] || '') + '000';
    var n = BigInt(m[2]) * 100n + BigInt(frac.slice(0, 2)) + (frac.charAt(2) >= '5' ? 1n : 0n);
    if (n === 0n && /[1-9]/.test(m[2] + (m[3] || ''))) return m[1] ? '>-0.01' : '<0.01';
    var s = n.toString();
    while (s.length < 3) s = '0' + s;
    var whole = s.slice(0, -2).replace(/\\B(?=(\\d{3})+(?!\\d))/g, ',');
    return (m[1] && n !== 0n ? '-' : '') + whole + '.' + s.slice(-2);
  }

  function exact(v) { return v === null || v === undefined || v === '' ? '' : v + ' USD'; }

  /** A table cell with an amount: cents shown, the exact figure on hover. */
  function moneyCell(tr, v) { var td = cell(tr, cents(v), 'num money'); td.title = exact(v); return td; }

  function setMoney(id, v) { var el = $(id); el.textContent = cents(v); el.title = exact(v); }

  /**
   * A table paged by cursor: #<name>-prev, #<name>-next and #<name>-page beside it. Earlier
   * pages' cursors are kept, so Previous goes back exactly; reset() returns to the first page.
   */
  function pager(name, load) {
    var p = { cursor: null, earlier: [], next: null };
    var reload = function () { load().catch(function (err) { notice(err.message); }); };
    $(name + '-prev').addEventListener('click', function () { p.cursor = p.earlier.pop() || null; reload(); });
    $(name + '-next').addEventListener('click', function () { p.earlier.push(p.cursor); p.cursor = p.next; reload(); });
    p.reset = function () { p.cursor = null; p.earlier = []; };
    /** After a page was drawn: the next page's cursor, or null on the last page. */
    p.shown = function (next) {
      p.next = next;
      $(name + '-next').disabled = !next;
      $(name + '-prev').disabled = p.earlier.length === 0;
      $(name + '-page').textContent = 'page ' + (p.earlier.length + 1);
    };
    return p;
  }

  /** Checks the books (every account) and lists the differences found. */
  function runAudit() {
    notice('');
    $('audit-result').textContent = 'checking...';
    $('audit-result').className = 'muted';
    return api('GET', '/audit').then(function (r) {
      var counted = r.accounts + ' accounts, ' + r.entries + ' ledger entries';
      var busy = r.unsettled && r.unsettled.length ? ' Not judged (their books changed during every reading; check again when quieter): the balance, held and spend of ' + r.unsettled.join(', ') + '.' : '';
      $('audit-result').textContent = (r.ok ? 'The books add up: ' + counted + ', no differences.' : r.differences.length + ' differences in ' + counted + '.') + busy;
      $('audit-result').className = r.ok ? 'good' : 'bad';
      $('audit-panel').dataset.ok = String(r.ok);
      fill('audit', r.differences, function (tr, d) {
        cell(tr, d.account); cell(tr, d.check); cell(tr, d.key || d.hold || ''); cell(tr, d.expected, 'num'); cell(tr, d.actual, 'num');
      });
      $('audit').hidden = r.differences.length === 0;
    }).catch(function (err) { $('audit-result').textContent = ''; notice(err.message); });
  }

  /** Auto-refresh: every 10 s while ticked and the tab is visible, never two refreshes at once. */
  var AUTO_MS = 10000;
  var auto = { timer: null, busy: false };
  function setAutoRefresh(on) {
    clearInterval(auto.timer);
    auto.timer = null;
    sessionStorage.setItem('mg-auto-refresh', on ? '1' : '');
    $('auto-refresh').checked = on;
    if (!on) return;
    auto.timer = setInterval(function () {
      if (auto.busy || document.hidden || !token()) return;
      auto.busy = true;
      refresh().catch(function (err) { notice(err.message); }).then(function () { auto.busy = false; });
    }, AUTO_MS);
  }

  $('run-audit').addEventListener('click', runAudit);
  $('auto-refresh').addEventListener('change', function () { setAutoRefresh($('auto-refresh').checked); });
`;
