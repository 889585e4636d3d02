/** Admin API handlers for an account's brands and knowledge documents. */
import type * as S from '../schemas.js';
import { type AdminContext, type Call, notFound } from './context.js';
import { GatewayError } from '../../errors.js';
import { ENTITY_ID } from '../../options/values.js';

/** The id a PUT creates under: the ids' own format, or 400 naming the path parameter. */
function newId(id: string, param: string): void {
  if (!ENTITY_ID.test(id)) {
    throw new GatewayError('invalid_request', `${param}: must be 1-64 letters, digits, "_", "-" or ".", and not "." or "..".`, { param });
  }
}

export async function listBrands(x: AdminContext, c: Call) {
  await x.account(c.params.id!);
  return { object: 'list', data: await x.stores.content.listBrands(c.params.id!) };
}

export async function getBrand(x: AdminContext, c: Call) {
  const b = await x.stores.content.getBrand(c.params.id!, c.params.brand!);
  if (!b) throw notFound('brand', c.params.brand!);
  return b;
}

export async function putBrand(x: AdminContext, c: Call<typeof S.brandBody>) {
  newId(c.params.brand!, 'brand');
  await x.account(c.params.id!);
  await x.admin.putBrand({ ...c.body, id: c.params.brand!, account: c.params.id! });
  return x.stores.content.getBrand(c.params.id!, c.params.brand!);
}

export async function deleteBrand(x: AdminContext, c: Call) {
  if (!(await x.admin.deleteBrand(c.params.id!, c.params.brand!))) throw notFound('brand', c.params.brand!);
  return { id: c.params.brand, deleted: true };
}

/** The list leaves the texts out (their size in bytes instead): one document may be large. */
export async function listDocuments(x: AdminContext, c: Call) {
  await x.account(c.params.id!);
  const docs = await x.stores.content.listDocuments(c.params.id!);
  return { object: 'list', data: docs.map(({ text, ...d }) => ({ ...d, bytes: Buffer.byteLength(text) })) };
}

export async function getDocument(x: AdminContext, c: Call) {
  const d = await x.stores.content.getDocument(c.params.id!, c.params.doc!);
  if (!d) throw notFound('document', c.params.doc!);
  return d;
}

export async function putDocument(x: AdminContext, c: Call<typeof S.documentBody>) {
  newId(c.params.doc!, 'doc');
  await x.account(c.params.id!);
  await x.admin.addDocument({ ...c.body, id: c.params.doc!, account: c.params.id! });
  return x.stores.content.getDocument(c.params.id!, c.params.doc!);
}

export async function deleteDocument(x: AdminContext, c: Call) {
  if (!(await x.admin.deleteDocument(c.params.id!, c.params.doc!))) throw notFound('document', c.params.doc!);
  return { id: c.params.doc, deleted: true };
}
