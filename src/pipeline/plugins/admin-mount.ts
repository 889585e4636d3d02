/** The admin API and console (when configured): operators only, outside /v1 and its limits. */
import type { Stage } from '../types.js';

export interface AdminMount {
  /** The path the admin lives under ("/admin", after any base path). */
  adminPath: string;
  basePath: string;
  /** Answers; `onRoute` is told the declared route pattern the request matched, if any. */
  handle(request: Request, path: string, query: string, requestId: string, onRoute?: (route: string) => void): Promise<Response>;
}

export function adminMount(admin: AdminMount | null, ready: () => Promise<void> | null): Stage | null {
  if (!admin) return null;
  return (x, next) => {
    if (!(x.path === admin.adminPath || x.path.startsWith(`${admin.adminPath}/`))) return next();
    // Until a declared route matches: the API's or the console's name, never the raw path
    // (ids in it would give metrics a label value per account or key).
    x.observed.record.route = x.path.startsWith(`${admin.adminPath}/v1/`) ? '/admin/v1' : '/admin';
    const onRoute = (route: string) => {
      x.observed.record.route = route;
    };
    const answer = () => admin.handle(x.request, x.path.slice(admin.basePath.length), x.query, x.requestId, onRoute);
    const waiting = ready();
    return waiting ? waiting.then(answer) : answer();
  };
}
