/**
 * The one path matcher of the gateway: the /v1 operations and the /admin/v1 routes are both
 * declared as (method, path) pairs and matched here. `{id}` is one path segment; `{id...}`
 * takes the rest of the path, slashes included (model ids such as "sim/fast-chat").
 */

export interface Routed {
  method: string;
  /** The path after the mount (/v1 or /admin/v1), with `{name}` parameters. */
  path: string;
}

export type Match<R> =
  /** The path and the method match: the route, with its parameters decoded. */
  | { found: R; params: Record<string, string> }
  /** The path matches, the method does not: the methods it allows, and the declared path it matched. */
  | { found: null; allow: string[]; path: string }
  /** Nothing is declared at this path. */
  | null;

export interface Router<R extends Routed> {
  match(path: string, method: string): Match<R>;
  readonly routes: readonly R[];
}

interface Compiled<R> {
  path: string;
  pattern: RegExp;
  names: string[];
  byMethod: Map<string, R>;
}

export function createRouter<R extends Routed>(routes: readonly R[]): Router<R> {
  const byPath = new Map<string, Compiled<R>>();
  for (const r of routes) {
    let c = byPath.get(r.path);
    if (!c) {
      const names: string[] = [];
      const pattern = new RegExp(
        `^${r.path.replace(/\{(\w+)(\.\.\.)?\}/g, (_, name: string, rest?: string) => {
          names.push(name);
          return rest ? '(.+)' : '([^/]+)';
        })}$`,
      );
      c = { path: r.path, pattern, names, byMethod: new Map() };
      byPath.set(r.path, c);
    }
    if (c.byMethod.has(r.method)) throw new Error(`Two routes for ${r.method} ${r.path}`);
    c.byMethod.set(r.method, r);
  }
  const compiled = [...byPath.values()];
  return {
    routes,
    match(path, method) {
      for (const c of compiled) {
        const m = c.pattern.exec(path);
        if (!m) continue;
        // A Map, not an object: a method named "constructor" or "__proto__" finds nothing.
        const found = c.byMethod.get(method);
        if (!found) return { found: null, allow: [...c.byMethod.keys()], path: c.path };
        const params: Record<string, string> = {};
        c.names.forEach((name, i) => {
          const raw = m[i + 1] ?? '';
          // A malformed escape ("%zz") names nothing that exists: kept raw, so the route
          // answers its own 404 instead of a URIError turning into a 500.
          try {
            params[name] = decodeURIComponent(raw);
          } catch {
            params[name] = raw;
          }
        });
        return { found, params };
      }
      return null;
    },
  };
}
