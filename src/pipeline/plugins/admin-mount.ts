/** The admin API and console (when configured): operators only, outside /v1 and its limits. */
import type { Stage } from '../types.js';

export interface AdminMount {
  /** The path the admin lives under ("/admin", after any base path). */
  adminPath: string;
  basePath: string;
  handle(request: Request, path: string, query: string, requestId: string): Promise<Response>;
}

export function adminMount(admin: AdminMount | null, ready: () => Promise<void> | null): Stage | null {
  if (!admin) return null;
  return (x, next) => {
    if (!(x.path === admin.adminPath || x.path.startsWith(`${admin.adminPath}/`))) return next();
    x.observed.record.route = x.path.startsWith(`${admin.adminPath}/v1/`) ? '/admin/v1' : '/admin';
    const answer = () => admin.handle(x.request, x.path.slice(admin.basePath.length), x.query, x.requestId);
    const waiting = ready();
    return waiting ? waiting.then(answer) : answer();
  };
}
