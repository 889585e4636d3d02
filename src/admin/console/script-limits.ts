/**
 * The console script's limits part (runs in the core's scope, see script-core.ts): a key's
 * model allow-list, tokens per minute and budgets, and an account's budgets, as the operator
 * types them and as the tables show them.
 *
 * Typed forms: models are comma separated ids or prefixes ending in "*" (empty: every model);
 * tokens per minute a whole number (empty: the configured default); budgets "USD/period"
 * items, comma separated, e.g. "5/day, 100/month" (empty: none). Input that does not read is
 * refused here with a message naming the field; the API checks the rest.
 */
export const SCRIPT_LIMITS = `
  function parseModels(v) {
    var list = v.split(',').map(function (m) { return m.trim(); }).filter(Boolean);
    return list.length ? list : null;
  }

  function parseTokensPerMinute(v) {
    if (!/^\\d+$/.test(v)) throw new Error('tokens per minute: a whole number (or empty for the default)');
    return Number(v);
  }

  function parseBudgets(v) {
    return v.split(',').map(function (b) { return b.trim(); }).filter(Boolean).map(function (b) {
      var m = /^\\$?(\\d+(?:\\.\\d+)?)\\s*\\/\\s*(day|week|month)$/.exec(b);
      if (!m) throw new Error('budgets: "' + b + '" is not USD/period (e.g. 5/day, 20/week, 100/month)');
      return { usd: m[1], period: m[2] };
    });
  }

  function budgetsText(budgets) {
    return (budgets || []).map(function (b) { return b.usd + '/' + b.period; }).join(', ');
  }

  /** A key's limits in words, for the keys table. */
  function limitsText(k) {
    return 'models: ' + (k.kind === 'agent' ? k.model : (k.models ? (k.models.length ? k.models.join(', ') : 'none') : 'all')) +
      '; tpm: ' + (k.tokensPerMinute === null || k.tokensPerMinute === undefined ? 'default' : k.tokensPerMinute) +
      '; budgets: ' + (budgetsText(k.budgets) || 'none');
  }

  function limitsInput(cls, placeholder, value, size) {
    var el = document.createElement('input');
    el.className = cls; el.placeholder = placeholder; el.value = value; el.size = size;
    return el;
  }

  /**
   * The key row's limits cell: the current limits and inputs that replace them through
   * PUT /keys/{id}/limits (an agent key keeps its one model, so it has no allow-list input).
   */
  function limitsCell(tr, k) {
    var td = cell(tr, limitsText(k));
    td.className = 'limits';
    var row = document.createElement('div'); row.className = 'row';
    // The allow-list is sent only when its text was changed: an empty input means every model,
    // and a key allowed none (an empty list, set through the API) shows an empty one too.
    var shownModels = (k.models || []).join(', ');
    var models = k.kind === 'agent' ? null : limitsInput('models', k.models && !k.models.length ? 'no model' : 'all models', shownModels, 16);
    var tpm = limitsInput('tpm', 'default tpm', k.tokensPerMinute === null || k.tokensPerMinute === undefined ? '' : String(k.tokensPerMinute), 8);
    var budgets = limitsInput('budgets', 'e.g. 5/day', budgetsText(k.budgets), 14);
    if (models) row.appendChild(models);
    row.appendChild(tpm); row.appendChild(budgets);
    row.appendChild(button('Set limits', 'set-limits', function () {
      var body;
      try {
        body = { tokensPerMinute: tpm.value.trim() === '' ? null : parseTokensPerMinute(tpm.value.trim()), budgets: parseBudgets(budgets.value) };
        if (models && models.value !== shownModels) body.models = parseModels(models.value);
      } catch (err) { notice(err.message); return; }
      change('PUT', '/keys/' + enc(k.id) + '/limits', body);
    }));
    td.appendChild(row);
  }

  $('budgets-form').addEventListener('submit', function (ev) {
    ev.preventDefault();
    var budgets;
    try { budgets = parseBudgets($('account-budgets').value); } catch (err) { notice(err.message); return; }
    change('PUT', '/accounts/' + enc(state.account) + '/budgets', { budgets: budgets });
  });
`;
