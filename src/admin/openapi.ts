/** The admin API's OpenAPI 3.1 document, generated from the route declarations and their zod schemas. */
import { z } from 'zod';
import type { AdminRoute } from './routes.js';

const errorRef = { $ref: '#/components/responses/Error' };

/** The error envelope, as /v1 answers it too. */
const errorResponse = {
  description: 'The error envelope',
  content: {
    'application/json': {
      schema: {
        type: 'object',
        required: ['error'],
        properties: {
          error: {
            type: 'object',
            required: ['message', 'type', 'code', 'param'],
            properties: {
              message: { type: 'string' },
              type: { type: 'string' },
              code: { type: ['string', 'null'] },
              param: { type: ['string', 'null'] },
              metadata: { type: 'object' },
            },
          },
        },
      },
    },
  },
};

export function openApiDocument(routes: readonly AdminRoute[], title: string): unknown {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const r of routes) (paths[`/admin/v1${r.path}`] ??= {})[r.method.toLowerCase()] = operation(r);
  return {
    openapi: '3.1.0',
    info: { title, version: '1' },
    paths,
    components: {
      securitySchemes: { adminToken: { type: 'http', scheme: 'bearer' } },
      responses: { Error: errorResponse },
    },
  };
}

function operation(r: AdminRoute): Record<string, unknown> {
  const names = [...r.path.matchAll(/\{(\w+)\}/g)].map((m) => m[1]!);
  const op: Record<string, unknown> = {
    summary: r.summary,
    operationId: `${r.method.toLowerCase()}${r.path.replace(/\{(\w+)\}/g, 'By_$1').replace(/[^A-Za-z0-9]+(.)?/g, (_, ch: string | undefined) => (ch ?? '').toUpperCase())}`,
    security: [{ adminToken: [] }],
    parameters: [
      ...names.map((n) => ({ name: n, in: 'path', required: true, schema: { type: 'string' } })),
      ...(r.query ? queryParameters(r.query) : []),
    ],
    responses: {
      [String(r.status ?? 200)]: {
        description: 'OK',
        content: { 'application/json': { schema: r.returns ? z.toJSONSchema(r.returns, { io: 'output' }) : { type: 'object' } } },
      },
      '400': errorRef,
      '401': errorRef,
      '404': errorRef,
    },
  };
  if (r.body) op.requestBody = { required: true, content: { 'application/json': { schema: z.toJSONSchema(r.body, { io: 'input' }) } } };
  return op;
}

/** OpenAPI query parameters from a zod object schema. */
function queryParameters(schema: z.ZodType): unknown[] {
  const js = z.toJSONSchema(schema, { io: 'input' }) as { properties?: Record<string, unknown>; required?: string[] };
  return Object.entries(js.properties ?? {}).map(([name, s]) => ({ name, in: 'query', required: js.required?.includes(name) ?? false, schema: s }));
}
