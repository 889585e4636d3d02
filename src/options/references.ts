/**
 * The checks that span sections of the options, after each section passed its own schema:
 * references (a key's account, a model's upstream), ids given twice, and a configured path
 * that would shadow one of the gateway's routes.
 */
import { networkProblem } from '../limits/client-address.js';

/** The parts of the parsed options these checks read. */
export interface CheckedConfig {
  upstreams: Record<string, unknown>;
  models: ReadonlyArray<{ id: string; type: string; upstream?: string | undefined; targets?: ReadonlyArray<{ upstream: string }> | undefined }>;
  accounts: ReadonlyArray<{ id: string }>;
  keys: ReadonlyArray<{ account: string; kind: string; model: string | null }>;
  brands: ReadonlyArray<{ id: string; account: string }>;
  documents: ReadonlyArray<{ id: string; account: string }>;
  idempotency: { maxAnswerBytes: number; maxBytesPerAccount: number };
  metrics: { path: string } | null;
  trustProxy: readonly string[];
  guardrails: ReadonlyArray<{ id: string; kind: string; upstream?: string }>;
}

/** The problems (one line each, `path: sentence`) in the references between sections; none: []. */
export function referenceProblems(cfg: CheckedConfig): string[] {
  const problems: string[] = [];
  const modelIds = new Set<string>();
  cfg.models.forEach((m, i) => {
    if (modelIds.has(m.id)) problems.push(`models[${i}].id: duplicate model id "${m.id}"`);
    modelIds.add(m.id);
    // Own keys only: "toString" or "__proto__" is found on every object.
    if (m.upstream !== undefined && !Object.hasOwn(cfg.upstreams, m.upstream)) problems.push(`models[${i}].upstream: no upstream named "${m.upstream}"`);
    m.targets?.forEach((t, j) => {
      if (!Object.hasOwn(cfg.upstreams, t.upstream)) problems.push(`models[${i}].targets[${j}].upstream: no upstream named "${t.upstream}"`);
    });
  });
  const accountIds = new Set<string>();
  cfg.accounts.forEach((a, i) => {
    if (accountIds.has(a.id)) problems.push(`accounts[${i}].id: duplicate account id "${a.id}"`);
    accountIds.add(a.id);
  });
  // A refusal names its guardrail: two with one id could not be told apart.
  const guardrailIds = new Set<string>();
  cfg.guardrails.forEach((g, i) => {
    if (guardrailIds.has(g.id)) problems.push(`guardrails[${i}].id: duplicate guardrail id "${g.id}"`);
    guardrailIds.add(g.id);
    if (g.upstream !== undefined && !Object.hasOwn(cfg.upstreams, g.upstream)) problems.push(`guardrails[${i}].upstream: no upstream named "${g.upstream}"`);
  });
  problems.push(...duplicatesPerAccount('brands', cfg.brands), ...duplicatesPerAccount('documents', cfg.documents));
  cfg.keys.forEach((k, i) => {
    if (!accountIds.has(k.account)) problems.push(`keys[${i}].account: no account "${k.account}"`);
    if (k.kind === 'agent') {
      const model = cfg.models.find((m) => m.id === k.model);
      if (!model) problems.push(`keys[${i}].model: an agent key needs the id of a configured text model`);
      else if (model.type !== 'text') problems.push(`keys[${i}].model: an agent key is pinned to a text model`);
    } else if (k.model !== null) {
      problems.push(`keys[${i}].model: only agent keys are pinned to a model`);
    }
  });
  cfg.brands.forEach((b, i) => {
    if (!accountIds.has(b.account)) problems.push(`brands[${i}].account: no account "${b.account}"`);
  });
  cfg.documents.forEach((d, i) => {
    if (!accountIds.has(d.account)) problems.push(`documents[${i}].account: no account "${d.account}"`);
  });
  if (cfg.idempotency.maxAnswerBytes > cfg.idempotency.maxBytesPerAccount) {
    problems.push('idempotency.maxAnswerBytes: must not be larger than idempotency.maxBytesPerAccount');
  }
  const shadowed = cfg.metrics && shadowedRoute(cfg.metrics.path);
  if (shadowed) problems.push(`metrics.path: "${cfg.metrics!.path}" would shadow ${shadowed}; choose a path outside them, such as "/metrics"`);
  // Read by the very parser the resolver uses: what passes here is what it takes at start.
  cfg.trustProxy.forEach((p, i) => {
    const problem = networkProblem(p);
    if (problem) problems.push(`trustProxy[${i}]: ${problem}`);
  });
  return problems;
}

/** An id seeded twice for one account: one of the two would silently replace the other. */
function duplicatesPerAccount(section: string, items: ReadonlyArray<{ id: string; account: string }>): string[] {
  const seen = new Set<string>();
  const problems: string[] = [];
  items.forEach((item, i) => {
    const key = JSON.stringify([item.account, item.id]);
    if (seen.has(key)) problems.push(`${section}[${i}].id: duplicate id "${item.id}" in account "${item.account}"`);
    seen.add(key);
  });
  return problems;
}

/**
 * The gateway's own routes a configured path would shadow (it is matched before them), or
 * null: the /v1 API, the admin API and console, the health and readiness probes.
 */
function shadowedRoute(path: string): string | null {
  const under = (prefix: string) => path === prefix || path.startsWith(`${prefix}/`);
  if (under('/v1')) return 'the /v1 API';
  if (under('/admin')) return 'the admin API and console under /admin';
  if (path === '/health' || path === '/ready') return `the ${path} probe`;
  return null;
}
