/**
 * A key's model allow-list: exact model ids, or prefixes ending in `*` ("acme/*" allows every
 * id that starts with "acme/"; "*" allows all). No list (null or absent) allows every model.
 */
export function allowsModel(patterns: readonly string[] | null | undefined, id: string): boolean {
  if (!patterns) return true;
  return patterns.some((p) => (p.endsWith('*') ? id.startsWith(p.slice(0, -1)) : p === id));
}
