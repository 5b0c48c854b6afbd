/** Sources: the holder's systems and the buildings (objects) they serve (spec "Source", Behaviour 1–2). */
import Joi from 'joi';
import { route } from '../routes.js';
import type { Services } from '../services.js';
import {
  backendBinding,
  idParams,
  link,
  objectId,
  pageOf,
  pageQuery,
  relativePath,
  resourceId,
  toPageRequest,
} from './schemas.js';
import { dateTime } from '../validation.js';
import {
  PROTOCOLS,
  MASKED_KEY_MOVED,
  droppedObjects,
  keyDestinationUnchanged,
  linksForOutput,
  maskedBinding,
  resolveLinks,
  type BackendBinding,
  type BackendInput,
  type LinkInput,
  type Protocol,
  type SourceRecord,
} from '../../domain/sources.js';
import { ApiError, conflict, invalidRequest, notFound } from '../../domain/errors.js';
import { idFromName } from '../../domain/ids.js';
import { isMasked } from '../../domain/masking.js';
import { sourceStore } from '../../db/sources.js';
import { productStore } from '../../db/products.js';
import { isUniqueViolation } from '../../db/paging.js';
import { probeHealth } from '../../gateway/dataplane/backend-client.js';
import { toRfc3339 } from '../../domain/time.js';

interface SourceInput {
  id?: string | null;
  name: string;
  protocol?: Protocol | null;
  health_path?: string | null;
  objects?: string[];
  backend?: BackendInput | null;
  links?: Array<LinkInput & { object: string }>;
}

const sourceBody = Joi.object({
  id: resourceId().allow('', null),
  name: Joi.string().trim().min(1).max(200).required(),
  protocol: Joi.string()
    .valid(...PROTOCOLS)
    .allow(null),
  health_path: relativePath().allow(null),
  objects: Joi.array().items(objectId()).unique(),
  backend: backendBinding.allow(null),
  links: Joi.array().items(link),
  created_at: dateTime().description('output only; ignored on input'),
});

const sourceOutput = Joi.object({
  id: Joi.string().required(),
  name: Joi.string().required(),
  protocol: Joi.string().valid(...PROTOCOLS),
  health_path: Joi.string().allow(null),
  objects: Joi.array().items(Joi.string()),
  backend: backendBinding.allow(null),
  links: Joi.array().items(link),
  created_at: dateTime(),
});

/** The answer for a source: keys masked everywhere, links only where they differ from the defaults. */
export function presentSource(s: SourceRecord) {
  const links = linksForOutput(s.links);
  return {
    id: s.id,
    name: s.name,
    protocol: s.protocol,
    health_path: s.health_path,
    objects: s.objects,
    backend: s.backend ? { ...maskedBinding(s.backend), links: links.map } : null,
    links: links.array,
    created_at: s.created_at,
  };
}

/**
 * Turns a request into a stored source. `stored` is the current source on a replace, so that
 * masked keys keep what was stored.
 */
function buildSource(
  input: SourceInput,
  id: string,
  stored: SourceRecord | undefined,
): Omit<SourceRecord, 'created_at'> {
  const protocol = input.protocol ?? 'platform';
  const objects = input.objects ?? [];
  let backend: BackendBinding | null = null;
  if (input.backend) {
    const b = input.backend;
    if (!b.allowed_methods || b.allowed_methods.length === 0) {
      throw invalidRequest(
        'needs at least one method (an empty list would let nothing through)',
        'backend.allowed_methods',
      );
    }
    if (protocol !== 'platform' && (!b.allowed_paths || b.allowed_paths.length === 0)) {
      throw invalidRequest(
        'needs at least one path pattern on a generic source (only platform sources get theirs from their links)',
        'backend.allowed_paths',
      );
    }
    let key = b.auth_header_value ?? null;
    if (isMasked(key)) {
      if (!stored?.backend?.auth_header_value)
        throw invalidRequest('is masked but no key is stored', 'backend.auth_header_value');
      if (!keyDestinationUnchanged(stored.backend, b))
        throw invalidRequest(MASKED_KEY_MOVED, 'backend.auth_header_value');
      key = stored.backend.auth_header_value;
    }
    backend = {
      base_url: b.base_url,
      auth_header_name: b.auth_header_name ?? null,
      auth_header_value: key,
      allowed_methods: b.allowed_methods,
      allowed_paths: b.allowed_paths ?? [],
    };
  }
  const keepMasked = !input.backend || keyDestinationUnchanged(stored?.backend, input.backend);
  const links = resolveLinks(objects, input.links, input.backend?.links, stored?.links, keepMasked);
  return { id, name: input.name, protocol, health_path: input.health_path ?? null, objects, backend, links };
}

export function sourceRoutes(services: Services) {
  const { db } = services;
  return [
    route<never, never, SourceInput>({
      method: 'post',
      path: '/sources',
      summary: 'Register a source (a system of the holder and the objects it serves)',
      tag: 'sources',
      role: 'operator',
      body: sourceBody,
      response: sourceOutput,
      status: 201,
      errors: ['conflict'],
      async handler({ body }) {
        const id = body.id ? body.id : idFromName(body.name);
        if (!id) throw invalidRequest('gives no usable id; send an id', 'name');
        const source = buildSource(body, id, undefined);
        try {
          return presentSource(await sourceStore(db).insert(source));
        } catch (err) {
          if (isUniqueViolation(err)) throw conflict(`a source with id '${id}' already exists`);
          throw err;
        }
      },
    }),
    route<never, { cursor?: string; limit: number }>({
      method: 'get',
      path: '/sources',
      summary: 'List sources (keys masked)',
      tag: 'sources',
      role: 'viewer',
      query: pageQuery,
      response: pageOf(sourceOutput),
      async handler({ query }) {
        const page = await sourceStore(db).list(toPageRequest(query));
        return { items: page.items.map(presentSource), next_cursor: page.next_cursor };
      },
    }),
    route<{ id: string }>({
      method: 'get',
      path: '/sources/:id',
      summary: 'Read a source',
      tag: 'sources',
      role: 'viewer',
      params: idParams,
      response: sourceOutput,
      async handler({ params }) {
        const source = await sourceStore(db).get(params.id);
        if (!source) throw notFound('source', params.id);
        return presentSource(source);
      },
    }),
    route<{ id: string }, never, SourceInput>({
      method: 'put',
      path: '/sources/:id',
      summary: 'Replace a source; a masked key sent back keeps the stored key',
      tag: 'sources',
      role: 'operator',
      params: idParams,
      body: sourceBody,
      response: sourceOutput,
      errors: ['conflict'],
      async handler({ params, body }) {
        if (body.id && body.id !== params.id)
          throw invalidRequest(`must be '${params.id}' or left out`, 'id');
        return db.transaction(async (trx) => {
          const stored = await sourceStore(trx).get(params.id, { forUpdate: true });
          if (!stored) throw notFound('source', params.id);
          const next = buildSource(body, params.id, stored);
          const dropped = droppedObjects(stored.objects, next.objects);
          const users = await productStore(trx).usingObjects(params.id, dropped);
          if (users.length > 0) {
            const list = users
              .map((p) => `${p.id} (${p.objects.filter((o) => dropped.includes(o)).join(', ')})`)
              .join('; ');
            throw conflict(`the change drops objects that products use: ${list}`);
          }
          return presentSource(await sourceStore(trx).replace(next));
        });
      },
    }),
    route<{ id: string }>({
      method: 'post',
      path: '/sources/:id/test',
      summary: "Test the source's system: ask its health path with the system's key",
      tag: 'sources',
      role: 'operator',
      params: idParams,
      response: Joi.object({
        source_id: Joi.string(),
        reachable: Joi.boolean().required(),
        status: Joi.number().integer().allow(null),
        latency_ms: Joi.number().integer(),
        url: Joi.string(),
        error: Joi.string().allow(null),
        checked_at: dateTime(),
      }),
      async handler({ params }) {
        const source = await sourceStore(db).get(params.id);
        if (!source) throw notFound('source', params.id);
        if (!source.backend)
          throw new ApiError('conflict', `source '${params.id}' has no backend binding to test`);
        const result = await probeHealth(source.backend, source.health_path);
        return { source_id: source.id, ...result, checked_at: toRfc3339(new Date()) };
      },
    }),
  ];
}
