/**
 * The console script's account part (runs in the core's scope, see script-core.ts): create an
 * account, the selected account's wallet (top-up or signed adjustment, each with a reason),
 * grants, budgets, spend in the date range by model and by key (with labels), its keys (create,
 * enable, disable, rotate, monthly cap, limits: script-limits.ts), latest ledger entries, jobs,
 * batches, and CSV export.
 *
 * A new key's or rotated key's secret is shown once, and cleared when another account is
 * selected or the operator signs out. The new-key form is built from KEY_FIELDS: a key setting
 * the API learns is one more entry there.
 */
export const SCRIPT_ACCOUNT = `
  /**
   * The new-key form: each field is an input (or a select with options) #key-<name>; a value
   * that is not empty is sent as that field of POST /keys, through parse when one is given.
   */
  var KEY_FIELDS = [
    { name: 'label', placeholder: 'label', size: 14 },
    { name: 'kind', options: ['developer', 'agent'] },
    { name: 'model', placeholder: 'model (agent keys)', size: 16, list: 'model-list' },
    { name: 'monthlyCapUsd', placeholder: 'monthly cap USD', size: 10 },
    { name: 'models', placeholder: 'models (ids or prefix*; empty: all)', size: 24, parse: parseModels },
    { name: 'tokensPerMinute', placeholder: 'tokens/min (empty: default)', size: 18, parse: parseTokensPerMinute },
    { name: 'budgets', placeholder: 'budgets, e.g. 5/day, 100/month', size: 22, parse: parseBudgets },
  ];

  function buildKeyForm() {
    var form = $('create-key-form');
    if (form.dataset.built) return;
    KEY_FIELDS.forEach(function (f) {
      var el;
      if (f.options) {
        el = document.createElement('select');
        f.options.forEach(function (o) { var opt = document.createElement('option'); opt.value = o; opt.textContent = o; el.appendChild(opt); });
      } else {
        el = document.createElement('input');
        el.placeholder = f.placeholder || f.name;
        if (f.size) el.size = f.size;
        if (f.list) el.setAttribute('list', f.list);
      }
      el.id = 'key-' + f.name;
      form.appendChild(el);
    });
    var submit = document.createElement('button');
    submit.type = 'submit'; submit.id = 'create-key'; submit.textContent = 'Create key';
    form.appendChild(submit);
    form.dataset.built = '1';
  }

  function keyBody() {
    var body = { account: state.account };
    KEY_FIELDS.forEach(function (f) {
      var v = $('key-' + f.name).value.trim();
      if (v !== '') body[f.name] = f.parse ? f.parse(v) : v;
    });
    return body;
  }

  function clearSecret() { var box = $('new-secret'); box.textContent = ''; delete box.dataset.key; }

  function showSecret(what, res) {
    var box = $('new-secret');
    box.textContent = what + ' ' + res.id + ' (shown once: copy it now): ';
    var code = document.createElement('code'); code.className = 'secret'; code.textContent = res.key;
    box.appendChild(code);
    box.dataset.key = res.id;
  }

  /** The selected account's ledger, a page at a time. */
  var LEDGER_PAGE = 25;
  var ledgerPages = pager('ledger', function () { return loadAccount(); });

  function selectAccount(id) {
    if (id !== state.account) { clearSecret(); ledgerPages.reset(); }
    state.account = id;
    Array.prototype.forEach.call(document.querySelectorAll('#accounts tbody tr'), function (tr) {
      tr.className = tr.dataset.account === id ? 'selected' : '';
    });
    return loadAccount().catch(function (err) { notice(err.message); });
  }

  function units(u) {
    if (u.kind === 'tokens') return u.prompt + ' + ' + u.completion + ' tokens';
    if (u.kind === 'images') return u.images + ' images (' + u.tier + ')';
    if (u.kind === 'seconds') return u.seconds + ' s (' + u.tier + ')';
    if (u.kind === 'speech_tokens') return u.tokens + ' speech tokens';
    if (u.kind === 'guardrail') return u.checks + ' check' + (u.checks === 1 ? '' : 's') + ' (guardrail ' + u.id + ')';
    if (u.kind === 'credit') return (u.adjustment ? 'adjustment: ' : u.reason === 'opening balance' || u.reason === 'top-up' ? '' : 'credit: ') + u.reason;
    return u.kind;
  }

  function keyRow(tr, k) {
    var path = '/keys/' + enc(k.id);
    tr.dataset.key = k.id;
    cell(tr, k.id); cell(tr, k.prefix); cell(tr, k.label); cell(tr, k.kind + (k.model ? ' (' + k.model + ')' : ''));
    moneyCell(tr, k.monthlyCapUsd); cell(tr, k.disabled ? 'disabled' : 'active');
    limitsCell(tr, k);
    var td = cell(tr, '', 'actions');
    td.appendChild(button(k.disabled ? 'Enable' : 'Disable', k.disabled ? 'enable' : 'disable', function () {
      change('POST', path + (k.disabled ? '/enable' : '/disable'));
    }));
    td.appendChild(button('Rotate', 'rotate', function () {
      if (!confirm('Rotate ' + k.id + '? The current secret stops working.')) return;
      change('POST', path + '/rotate', undefined, function (res) { showSecret('New secret for', res); });
    }));
    td.appendChild(button('Delete', 'delete', function () {
      if (!confirm('Delete ' + k.id + '? Calls with it get 401 at once; its ledger entries stay.')) return;
      change('DELETE', path, undefined, function () { if ($('new-secret').dataset.key === k.id) clearSecret(); });
    }));
    var cap = document.createElement('input');
    cap.className = 'cap'; cap.placeholder = 'cap USD'; cap.value = k.monthlyCapUsd || '';
    td.appendChild(cap);
    td.appendChild(button('Set cap', 'set-cap', function () {
      change('PUT', path + '/monthly-cap', { monthlyCapUsd: cap.value.trim() === '' ? null : cap.value.trim() });
    }));
  }

  function loadAccount() {
    var a = state.account, q = '?account=' + enc(a);
    return Promise.all([
      api('GET', '/accounts/' + enc(a)),
      api('GET', '/usage' + q + '&group_by=model' + range()),
      api('GET', '/usage' + q + '&group_by=key' + range()),
      api('GET', '/keys' + q),
      api('GET', '/ledger' + q + '&limit=' + LEDGER_PAGE + range() + (ledgerPages.cursor ? '&cursor=' + enc(ledgerPages.cursor) : '')),
      api('GET', '/jobs' + q),
      api('GET', '/batches' + q),
    ]).then(function (r) {
      if (a !== state.account) return; // another account was selected meanwhile
      $('account-view').hidden = false;
      Array.prototype.forEach.call(document.querySelectorAll('.account-part'), function (s) { s.hidden = false; });
      $('account-name').textContent = a;
      setMoney('balance', r[0].balanceUsd);
      setMoney('held', r[0].heldUsd);
      $('holds').textContent = r[0].openHolds;
      if (document.activeElement !== $('grants')) $('grants').value = r[0].grants.join(', ');
      if (document.activeElement !== $('account-budgets')) $('account-budgets').value = budgetsText(r[0].budgets);
      setMoney('total', r[1].totalUsd);
      fill('by-model', r[1].data, function (tr, x) { cell(tr, x.group); cell(tr, x.calls, 'num'); moneyCell(tr, x.costUsd); });
      fill('by-key', r[2].data, function (tr, x) { cell(tr, x.group); cell(tr, x.label); cell(tr, x.calls, 'num'); moneyCell(tr, x.costUsd); });
      fill('keys', r[3].data, keyRow);
      fill('ledger', r[4].data, function (tr, e) {
        cell(tr, shortTime(new Date(e.at).toISOString())); cell(tr, e.id); cell(tr, e.key); cell(tr, e.model);
        cell(tr, units(e.units)); moneyCell(tr, e.costUsd);
      });
      ledgerPages.shown(r[4].more ? r[4].nextCursor : null);
      fill('jobs', r[5].data, function (tr, j) { cell(tr, j.id); cell(tr, j.object); cell(tr, j.model); cell(tr, j.status); cell(tr, j.progress, 'num'); });
      fill('batches', r[6].data, function (tr, b) {
        var n = b.request_counts;
        cell(tr, b.id); cell(tr, b.endpoint); cell(tr, b.model); cell(tr, b.status);
        cell(tr, n.completed, 'num'); cell(tr, n.failed, 'num'); cell(tr, n.total, 'num');
      });
    });
  }

  /** Downloads the ledger as CSV (the API needs the token, so a plain link cannot). */
  function exportCsv(query, name) {
    notice('');
    fetch(API + '/ledger?format=csv' + query, { headers: { authorization: 'Bearer ' + token() } })
      .then(function (res) {
        if (!res.ok) return res.json().then(function (d) { throw new Error((d.error && d.error.message) || ('HTTP ' + res.status)); });
        return res.blob();
      })
      .then(function (blob) {
        var a = document.createElement('a');
        a.href = URL.createObjectURL(blob); a.download = name;
        document.body.appendChild(a); a.click(); a.remove();
        setTimeout(function () { URL.revokeObjectURL(a.href); }, 10000);
      })
      .catch(function (err) { notice(err.message); });
  }

  $('create-account-form').addEventListener('submit', function (ev) {
    ev.preventDefault();
    var body = { id: $('new-account-id').value.trim() };
    if ($('new-account-wallet').value.trim()) body.walletUsd = $('new-account-wallet').value.trim();
    change('POST', '/accounts', body, function (res) {
      $('new-account-id').value = ''; $('new-account-wallet').value = '';
      clearSecret();
      state.account = res.id;
    });
  });
  $('create-key-form').addEventListener('submit', function (ev) {
    ev.preventDefault();
    var body;
    try { body = keyBody(); } catch (err) { notice(err.message); return; }
    change('POST', '/keys', body, function (res) {
      KEY_FIELDS.forEach(function (f) { if (!f.options) $('key-' + f.name).value = ''; });
      showSecret('New key', res);
    }, $('create-key-form'));
  });
  // One id per credit the operator means, kept until it is applied: the same credit sent
  // again (a double click, a retry after an answer that never came) is applied once. A credit
  // with other values, or after the last one was applied, gets a new id.
  var pendingCredit = null;
  $('credit-form').addEventListener('submit', function (ev) {
    ev.preventDefault();
    var path = '/accounts/' + enc(state.account) + '/' + $('credit-kind').value;
    var body = { amountUsd: $('credit-amount').value.trim(), reason: $('credit-reason').value.trim() };
    var meant = JSON.stringify([path, body.amountUsd, body.reason]);
    if (!pendingCredit || pendingCredit.meant !== meant) pendingCredit = { meant: meant, id: randomId('console-') };
    body.id = pendingCredit.id;
    change('POST', path, body, function () {
      pendingCredit = null;
      $('credit-amount').value = ''; $('credit-reason').value = '';
    }, $('credit-form'));
  });
  $('grants-form').addEventListener('submit', function (ev) {
    ev.preventDefault();
    var models = $('grants').value.split(',').map(function (m) { return m.trim(); }).filter(Boolean);
    change('PUT', '/accounts/' + enc(state.account) + '/grants', { models: models });
  });
  $('export-all').addEventListener('click', function () { exportCsv(range(), 'ledger-all.csv'); });
  $('export-account').addEventListener('click', function () {
    exportCsv('&account=' + enc(state.account) + range(), 'ledger-' + state.account + '.csv');
  });
`;
