/** The OpenAPI 3.1 document, generated from the same route declarations and joi schemas that validate requests. */
import joiToJson from 'joi-to-json';
import type Joi from 'joi';
import type { RouteRegistry } from './routes.js';

const toOpenApiPath = (prefix: string, path: string) => `${prefix}${path}`.replace(/:([A-Za-z_]+)/g, '{$1}');

// joi-to-json is CommonJS (`module.exports = parse`) while its types declare a default export.
const parse = joiToJson as unknown as typeof joiToJson.parse;
/**
 * joi-to-json renders `object().pattern(regex, …)` as patternProperties (right) and also as a
 * property literally named after the regex (wrong); drop the latter, recursively.
 */
function withoutRegexProperties(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(withoutRegexProperties);
  if (node === null || typeof node !== 'object') return node;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(node)) out[k] = withoutRegexProperties(v);
  if (out.patternProperties && out.properties && typeof out.properties === 'object') {
    out.properties = Object.fromEntries(
      Object.entries(out.properties).filter(([name]) => !/^\/.*\/[a-z]*$/.test(name)),
    );
  }
  return out;
}

const schemaOf = (schema: Joi.Schema): Record<string, unknown> =>
  withoutRegexProperties(parse(schema as never, 'open-api-3.1')) as Record<string, unknown>;

const errorBody = {
  type: 'object',
  required: ['error'],
  properties: {
    error: {
      type: 'object',
      required: ['code', 'message'],
      properties: { code: { type: 'string' }, message: { type: 'string' } },
    },
  },
};

export function buildOpenApi(
  registries: RouteRegistry[],
  info: { version: string },
): Record<string, unknown> {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const registry of registries) {
    for (const spec of registry.specs) {
      const path = toOpenApiPath(registry.prefix, spec.path);
      const parameters: unknown[] = [];
      for (const [where, schema] of [
        ['path', spec.params],
        ['query', spec.query],
      ] as const) {
        if (!schema) continue;
        const json = schemaOf(schema) as { properties?: Record<string, unknown>; required?: string[] };
        for (const [name, s] of Object.entries(json.properties ?? {})) {
          parameters.push({
            name,
            in: where,
            required: where === 'path' || (json.required ?? []).includes(name),
            schema: s,
          });
        }
      }
      const status = String(spec.status ?? 200);
      paths[path] ??= {};
      paths[path][spec.method] = {
        summary: spec.summary,
        tags: [spec.tag],
        ...(spec.role ? { security: [{ apiKey: [] }], 'x-required-role': spec.role } : { security: [] }),
        ...(parameters.length ? { parameters } : {}),
        ...(spec.body
          ? {
              requestBody: {
                required: true,
                content: { 'application/json': { schema: schemaOf(spec.body) } },
              },
            }
          : {}),
        responses: {
          [status]: {
            description: 'success',
            ...(spec.response
              ? { content: { 'application/json': { schema: schemaOf(spec.response) } } }
              : {}),
          },
          default: {
            description: `error (codes: invalid_request, unauthenticated, forbidden, not_found${spec.errors?.length ? ', ' + spec.errors.join(', ') : ''})`,
            content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } },
          },
        },
      };
    }
  }
  return {
    openapi: '3.1.0',
    info: { title: 'Building data connector: management API', version: info.version },
    paths,
    components: {
      securitySchemes: {
        apiKey: { type: 'http', scheme: 'bearer', description: 'An API key: Authorization: Bearer plk_…' },
      },
      schemas: { Error: errorBody },
    },
  };
}
