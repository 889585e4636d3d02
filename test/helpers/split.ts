/**
 * Splits `bytes` at the given cut points (each taken modulo the length + 1, repeats ignored),
 * dropping empty pieces: the reads a stream might arrive in.
 */
export function split(bytes: Buffer, cuts: number[]): Buffer[] {
  const at = [...new Set(cuts.map((c) => c % (bytes.length + 1)))].sort((a, b) => a - b);
  const out: Buffer[] = [];
  let from = 0;
  for (const c of at) {
    out.push(bytes.subarray(from, c));
    from = c;
  }
  out.push(bytes.subarray(from));
  return out.filter((b) => b.length > 0);
}
