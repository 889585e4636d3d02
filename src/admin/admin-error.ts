/** An operator's mistake in an admin call (unknown account, bad amount...): its message is for them. */
export class AdminError extends Error {
  override name = 'AdminError';
}
