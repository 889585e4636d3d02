/**
 * An operator's mistake in an admin call (unknown account, bad amount...): its message is for
 * them, and `param` names the field at fault when one is (else a message "field: ..." names it).
 */
export class AdminError extends Error {
  override name = 'AdminError';

  constructor(
    message: string,
    readonly param: string | null = /^([A-Za-z][\w.[\]]*): /.exec(message)?.[1] ?? null,
  ) {
    super(message);
  }
}
