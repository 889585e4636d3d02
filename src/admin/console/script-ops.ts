/**
 * The console script's operations part (runs in the core's scope, see script-core.ts): this
 * instance's recent requests and errors, latency and error rate per model, its upstreams and
 * their circuit breakers, the response cache's hit rate and savings per account and model, the
 * recent guardrail blocks and the recent admin changes.
 */
export const SCRIPT_OPS = `
  /** Recent requests, newest first, a page at a time (the next page: older than its last row). */
  var REQUESTS_PAGE = 25;
  var requestPages = pager('requests', function () { return loadOps(); });

  function loadOps() {
    return Promise.all([
      api('GET', '/requests?limit=' + REQUESTS_PAGE + (requestPages.cursor ? '&before=' + enc(requestPages.cursor) : '')),
      api('GET', '/requests?errors=true&limit=20'),
      api('GET', '/model-stats'),
      api('GET', '/upstreams'),
      api('GET', '/changes?limit=20'),
      api('GET', '/cache'),
      api('GET', '/guardrails/blocks?limit=20'),
    ]).then(function (r) {
      fill('cache-stats', r[5].data, function (tr, c) {
        cell(tr, c.account); cell(tr, c.model); cell(tr, c.hits, 'num');
        cell(tr, (c.hit_rate * 100).toFixed(1) + '%', 'num'); moneyCell(tr, c.saved_usd);
      });
      fill('requests', r[0].data, function (tr, x) {
        tr.dataset.request = x.request_id;
        cell(tr, shortTime(x.time)); cell(tr, x.request_id); cell(tr, x.method + ' ' + x.route);
        cell(tr, x.status, x.status >= 400 ? 'bad' : ''); cell(tr, x.account); cell(tr, x.key_id); cell(tr, x.model);
        cell(tr, x.latency_ms, 'num'); moneyCell(tr, x.cost_usd);
      });
      var last = r[0].data[r[0].data.length - 1];
      requestPages.shown(r[0].more && last ? last.request_id : null);
      fill('errors', r[1].data, function (tr, x) {
        tr.dataset.request = x.request_id;
        cell(tr, shortTime(x.time)); cell(tr, x.request_id); cell(tr, x.method + ' ' + x.route);
        cell(tr, x.status, 'bad'); cell(tr, x.error_code); cell(tr, x.account); cell(tr, x.model);
      });
      fill('model-stats', r[2].data, function (tr, m) {
        cell(tr, m.model); cell(tr, m.calls, 'num'); cell(tr, m.p50_ms, 'num'); cell(tr, m.p95_ms, 'num');
        cell(tr, (m.error_rate * 100).toFixed(1) + '%', m.errors ? 'num bad' : 'num'); cell(tr, m.refused, 'num');
      });
      fill('upstreams', r[3].data, function (tr, u) {
        tr.dataset.upstream = u.name;
        cell(tr, u.name + (u.simulated ? ' (simulator)' : ''));
        cell(tr, u.state + (u.openedAt ? ' since ' + shortTime(new Date(u.openedAt).toISOString()) : ''), u.state === 'closed' ? 'good' : 'bad');
        cell(tr, u.recentFailures, 'num'); cell(tr, u.models.join(', '));
      });
      var models = $('model-list');
      models.textContent = '';
      r[3].data.forEach(function (u) { u.models.forEach(function (m) { var o = document.createElement('option'); o.value = m; models.appendChild(o); }); });
      fill('changes', r[4].data, function (tr, c) {
        cell(tr, shortTime(c.time)); cell(tr, c.admin + ' (' + c.token_id + ')'); cell(tr, c.method + ' ' + c.route);
        cell(tr, Object.keys(c.target).map(function (k) { return k + '=' + c.target[k]; }).join(' '));
        cell(tr, JSON.stringify(c.change), 'wrap');
      });
      fill('guardrail-blocks', r[6].data, function (tr, b) {
        tr.dataset.request = b.requestId;
        cell(tr, shortTime(b.at)); cell(tr, b.guardrail); cell(tr, b.on); cell(tr, b.requestId);
        cell(tr, b.account); cell(tr, b.model); cell(tr, b.path);
      });
    });
  }
`;
