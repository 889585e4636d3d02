/**
 * OpenAI's Files API, for batches: upload (multipart `file` and `purpose: "batch"`, within
 * `limits.maxFileBytes`), list, retrieve, read back and delete an account's files. A file of
 * another account is a 404, as one that never existed.
 */
import { GatewayError } from '../../errors.js';
import { readBody } from '../../http/body.js';
import { json } from '../../http/json.js';
import type { RequestContext } from '../../pipeline/types.js';
import type { Services } from '../../services.js';
import type { FileRecord } from '../../stores/types.js';
import { readMultipart } from '../videos/multipart.js';
import { fileExpired, fileNotFound, fileView, listLimit, listView, newFileId } from './views.js';

const TEXT_FIELDS: ReadonlySet<string> = new Set(['purpose', 'expires_after[anchor]', 'expires_after[seconds]']);
/**
 * What a multipart upload carries beside its file (boundaries, part headers, `purpose`): the
 * limit bounds the file itself, so a file of exactly `limits.maxFileBytes` is taken.
 */
const FORM_SLACK_BYTES = 64 * 1024;

export async function uploadFile(core: Services, ctx: RequestContext): Promise<Response> {
  const contentType = ctx.request.headers.get('content-type') ?? '';
  if (!/^multipart\/form-data/i.test(contentType)) throw new GatewayError('invalid_request', 'Upload a file as multipart/form-data with the fields `file` and `purpose`.', { param: 'file' });
  const max = core.cfg.limits.maxFileBytes;
  const bytes = await readBody(ctx.request, max + FORM_SLACK_BYTES, core.cfg.limits.bodyTimeoutMs);
  const form = readMultipart(bytes, contentType, TEXT_FIELDS);
  const purpose = form.fields.purpose;
  if (purpose !== 'batch') throw new GatewayError('invalid_request', "purpose must be 'batch': this gateway keeps files for batches only.", { param: 'purpose' });
  const files = form.files.filter((f) => f.name === 'file');
  if (files.length !== 1) throw new GatewayError('invalid_request', 'Send exactly one `file` part.', { param: 'file' });
  const part = files[0]!;
  if (part.data.byteLength > max) throw new GatewayError('request_too_large', `The file is larger than the limit of ${max} bytes.`, { param: 'file' });
  // Kept with the file: NUL is refused here (PostgreSQL cannot store it), not met as a store failure.
  if (part.filename.includes('\u0000')) throw new GatewayError('invalid_request', "The file's name must not contain NUL.", { param: 'file' });
  const createdAt = Math.floor(core.now() / 1000);
  const expiresAfter = readExpiresAfter(form.fields);
  const room = core.cfg.limits.maxFileBytesPerAccount;
  const kept = await keptFileBytes(core, ctx.key.accountId, createdAt);
  if (kept + part.data.byteLength > room) {
    throw new GatewayError(
      'invalid_request',
      `This account keeps ${kept} bytes of files; this one (${part.data.byteLength} bytes) would pass its limit of ${room}. Delete files it no longer needs, or upload with expires_after.`,
      { param: 'file' },
    );
  }
  const record = {
    id: newFileId(),
    accountId: ctx.key.accountId,
    purpose,
    filename: part.filename.slice(0, 255),
    bytes: part.data.byteLength,
    createdAt,
    ...(expiresAfter === null ? {} : { expiresAt: createdAt + expiresAfter }),
  };
  await core.stores.batches.putFile(record, part.data);
  return json(200, fileView(record));
}

/** The shortest and longest lifetimes an upload may ask for, in seconds (OpenAI's: an hour, 30 days). */
const EXPIRES_AFTER_S = [3_600, 2_592_000] as const;

/**
 * `expires_after[anchor]` and `expires_after[seconds]`: how long after its upload a file is
 * there (seconds), or null when the upload did not ask. Given, they are checked as OpenAI
 * checks them: the only anchor is `created_at`.
 */
function readExpiresAfter(fields: Record<string, string | undefined>): number | null {
  const anchor = fields['expires_after[anchor]'];
  const seconds = fields['expires_after[seconds]'];
  if (anchor === undefined && seconds === undefined) return null;
  if (anchor !== 'created_at') throw new GatewayError('invalid_request', "expires_after[anchor] must be 'created_at'.", { param: 'expires_after[anchor]' });
  const n = seconds !== undefined && /^\d{1,10}$/.test(seconds) ? Number(seconds) : Number.NaN;
  if (!(n >= EXPIRES_AFTER_S[0] && n <= EXPIRES_AFTER_S[1])) {
    throw new GatewayError('invalid_request', `expires_after[seconds] must be a whole number of seconds from ${EXPIRES_AFTER_S[0]} to ${EXPIRES_AFTER_S[1]}.`, { param: 'expires_after[seconds]' });
  }
  return n;
}

/** The account's file `id`, unless it is not there (never was, deleted, or expired). */
async function liveFile(core: Services, accountId: string, id: string): Promise<FileRecord | null> {
  const f = await core.stores.batches.getFile(accountId, id);
  return f && !fileExpired(f, Math.floor(core.now() / 1000)) ? f : null;
}

/** The bytes of the account's file `id`, unless it is not there (never was, deleted, or expired). */
export async function liveFileContent(core: Services, accountId: string, id: string): Promise<Uint8Array | null> {
  return (await liveFile(core, accountId, id)) ? core.stores.batches.fileContent(accountId, id) : null;
}

/**
 * The bytes of the account's files that have not expired: read page by page (an account holds
 * few files, each up to `maxFileBytes`). The expired ones met on the way are deleted (they read
 * as deleted already, and nothing else removes their bytes), so uploads that ask to expire
 * cannot fill the store either; but not the input of a batch still running (it, or the
 * instance that adopts it, reads that on). Checked before each upload, not under a lock: uploads made at
 * the same moment may pass the limit by their own sizes.
 */
async function keptFileBytes(core: Services, accountId: string, nowS: number): Promise<number> {
  let total = 0;
  let after: { createdAt: number; id: string } | undefined;
  const expired: string[] = [];
  for (;;) {
    const page = await core.stores.batches.listFiles(accountId, { order: 'asc', limit: 10_000, ...(after ? { after } : {}) });
    for (const f of page) {
      if (fileExpired(f, nowS)) expired.push(f.id);
      else total += f.bytes;
    }
    const last = page[page.length - 1];
    if (page.length < 10_000 || !last) break;
    after = { createdAt: last.createdAt, id: last.id };
  }
  if (expired.length) {
    const running = new Set((await core.stores.batches.unfinishedBatches()).filter((b) => b.accountId === accountId).map((b) => b.inputFileId));
    for (const id of expired) if (!running.has(id)) await core.stores.batches.deleteFile(accountId, id);
  }
  return total;
}

export async function listFiles(core: Services, ctx: RequestContext): Promise<Response> {
  const limit = listLimit(ctx.query, 10_000, 10_000);
  const order = ctx.query.get('order') ?? 'desc';
  if (order !== 'asc' && order !== 'desc') throw new GatewayError('invalid_request', "order must be 'asc' or 'desc'.", { param: 'order' });
  const afterId = ctx.query.get('after');
  let after: { createdAt: number; id: string } | undefined;
  if (afterId) {
    const f = await core.stores.batches.getFile(ctx.key.accountId, afterId);
    if (!f) throw new GatewayError('invalid_request', `after names no file: ${afterId.slice(0, 100)}`, { param: 'after' });
    after = { createdAt: f.createdAt, id: f.id };
  }
  const purpose = ctx.query.get('purpose') ?? undefined;
  // Expired files read as deleted: skipped, and the store read on past them, so a page is as
  // full, and says as truly whether more follow, as without them. Each read past them asks for
  // four times as many as the last (up to 10,000): thousands of expired files cost a few reads,
  // not one read of a page's size each.
  const nowS = Math.floor(core.now() / 1000);
  const page: FileRecord[] = [];
  for (let step = limit + 1; ; step = Math.min(10_000, step * 4)) {
    const raw = await core.stores.batches.listFiles(ctx.key.accountId, { order, limit: step, ...(after ? { after } : {}), ...(purpose ? { purpose } : {}) });
    for (const f of raw) if (!fileExpired(f, nowS) && page.length <= limit) page.push(f);
    const last = raw[raw.length - 1];
    if (page.length > limit || raw.length < step || !last) break;
    after = { createdAt: last.createdAt, id: last.id };
  }
  return json(200, listView(page.slice(0, limit), page.length > limit, fileView));
}

export async function retrieveFile(core: Services, ctx: RequestContext): Promise<Response> {
  const id = ctx.params.id ?? '';
  const f = await liveFile(core, ctx.key.accountId, id);
  if (!f) throw fileNotFound(id);
  return json(200, fileView(f));
}

export async function fileContent(core: Services, ctx: RequestContext): Promise<Response> {
  const id = ctx.params.id ?? '';
  const content = await liveFileContent(core, ctx.key.accountId, id);
  if (!content) throw fileNotFound(id);
  return new Response(content as Uint8Array<ArrayBuffer>, { status: 200, headers: { 'content-type': 'application/octet-stream', 'content-length': String(content.byteLength) } });
}

export async function deleteFile(core: Services, ctx: RequestContext): Promise<Response> {
  const id = ctx.params.id ?? '';
  if (!(await core.stores.batches.deleteFile(ctx.key.accountId, id))) throw fileNotFound(id);
  return json(200, { id, object: 'file', deleted: true });
}
