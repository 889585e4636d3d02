/**
 * OpenAI's published OpenAPI document (the pinned copy in test/fixtures/openapi) as validators:
 * `schemas.check('CreateChatCompletionResponse', body)` returns the ways `body` breaks that
 * component schema ([] when it conforms), so a test can show them.
 *
 * The document is OpenAPI 3.1 (JSON Schema 2020-12), compiled with Ajv2020. What Ajv does not
 * read as OpenAPI means it is adapted, each for a stated reason:
 * - `discriminator` is dropped: the `oneOf`/`anyOf` it annotates already decides the branch;
 * - `nullable: true` (OpenAPI 3.0, left in a few places) becomes a `null` alternative;
 * - formats OpenAPI adds (`unixtime`, `int64`, `double`, `float`, `binary`) are
 *   annotations here: the `type` beside them is what is checked.
 * Schemas stay open where the document leaves them open: a gateway's extra fields conform
 * unless a schema says `additionalProperties: false`.
 */
import { readFileSync } from 'node:fs';
import { Ajv2020, type ErrorObject, type ValidateFunction } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';

const DOCUMENT = new URL('../fixtures/openapi/openai-openapi.json', import.meta.url);
const ID = 'https://openai.test/openapi.json';
const ANNOTATION_FORMATS = ['unixtime', 'int64', 'int32', 'double', 'float', 'binary'];

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };

/** The document's schemas with OpenAPI's own keywords turned into JSON Schema (see above). */
function adapt(node: Json): Json {
  if (Array.isArray(node)) return node.map(adapt);
  if (!node || typeof node !== 'object') return node;
  const out: { [k: string]: Json } = {};
  for (const [k, v] of Object.entries(node)) {
    if (k === 'discriminator' || k === 'nullable' || k.startsWith('x-')) continue;
    if (k === 'example' || k === 'examples' || k === 'default' || k === 'enum' || k === 'const') out[k] = v;
    // The names under `properties` are data, not keywords: only their schemas are adapted.
    else if (k === 'properties' && v && typeof v === 'object' && !Array.isArray(v)) out[k] = Object.fromEntries(Object.entries(v).map(([name, s]) => [name, adapt(s)]));
    else out[k] = adapt(v);
  }
  if (node.nullable === true) return { anyOf: [out, { type: 'null' }] };
  return out;
}

export interface OpenAISchemas {
  /** The ways `value` breaks the component schema `name`, each as "path: message"; [] when it conforms. */
  check(name: string, value: unknown): string[];
  /** Names of the component schemas. */
  names(): string[];
}

const describe = (errors: ErrorObject[] | null | undefined): string[] =>
  (errors ?? []).map((e) => `${e.instancePath || '/'} ${e.message ?? 'is invalid'}${e.params ? ` ${JSON.stringify(e.params)}` : ''}`);

/** Loads and compiles the pinned document (once per call: tests keep the result). */
export function openaiSchemas(): OpenAISchemas {
  const doc = JSON.parse(readFileSync(DOCUMENT, 'utf8')) as { components: { schemas: Record<string, Json> } };
  const schemas = adapt(doc.components.schemas) as Record<string, Json>;
  const ajv = new Ajv2020({ strict: false, allErrors: true, validateSchema: false, validateFormats: true });
  addFormats.default(ajv);
  for (const f of ANNOTATION_FORMATS) ajv.addFormat(f, true);
  ajv.addSchema({ $id: ID, components: { schemas } });
  const compiled = new Map<string, ValidateFunction>();
  return {
    check(name, value) {
      if (!(name in schemas)) throw new Error(`no component schema ${name}`);
      let validate = compiled.get(name);
      if (!validate) {
        validate = ajv.compile({ $ref: `${ID}#/components/schemas/${name}` });
        compiled.set(name, validate);
      }
      return validate(value) ? [] : describe(validate.errors);
    },
    names: () => Object.keys(schemas),
  };
}
