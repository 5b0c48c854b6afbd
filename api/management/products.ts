/** Products: datasets over one or more objects, delivered from an own source (spec "Product", Behaviour 3). */
import Joi from 'joi';
import type { Db } from '../../db/knex.js';
import { route } from '../routes.js';
import type { Services } from '../services.js';
import { backendBinding, idParams, pageOf, pageQuery, resourceId, toPageRequest } from './schemas.js';
import { dateTime, nullableString } from '../validation.js';
import { ApiError, conflict, invalidRequest, notFound } from '../../domain/errors.js';
import { idFromName } from '../../domain/ids.js';
import { isMasked } from '../../domain/masking.js';
import { DATA_PROFILE, PROFILES, TOPOLOGY_PROFILE } from '../../domain/profiles.js';
import {
  MASKED_KEY_MOVED,
  defaultLink,
  keyDestinationUnchanged,
  maskedBinding,
  type BackendBinding,
  type BackendInput,
  type SourceRecord,
} from '../../domain/sources.js';
import { toRfc3339 } from '../../domain/time.js';
import { productStore, type ProductRecord, type Selection } from '../../db/products.js';
import { sourceStore } from '../../db/sources.js';
import { offerStore, type OfferRecord } from '../../db/offers.js';
import { isUniqueViolation } from '../../db/paging.js';
import { BackendCallError, listPointIds } from '../../gateway/dataplane/backend-client.js';
import { offerOutput, presentOffer } from './offers.js';

interface ProductInput {
  id?: string | null;
  title: string;
  description?: string | null;
  keywords?: string[];
  objects?: string[];
  building_id?: string | null;
  sort?: string | null;
  selection?: { kind: 'all' | 'points'; points?: string[] } | null;
  points?: string[] | null;
  source_id?: string | null;
  delegation_id?: string | null;
  backend?: BackendInput | null;
  content_type?: string | null;
  profile?: string | null;
}

const selection = Joi.object({
  kind: Joi.string().valid('all', 'points').required(),
  points: Joi.array().items(Joi.string().min(1)).unique(),
});

const productBody = Joi.object({
  id: resourceId().allow(null),
  title: Joi.string().trim().min(1).max(300).required(),
  description: nullableString(),
  keywords: Joi.array().items(Joi.string().min(1)),
  objects: Joi.array().items(Joi.string().min(1).max(256)).unique(),
  building_id: Joi.string().min(1).allow(null),
  sort: nullableString(),
  selection: selection.allow(null),
  points: Joi.array().items(Joi.string().min(1)).unique().allow(null),
  source_id: Joi.string().min(1).allow(null),
  delegation_id: Joi.string().min(1).allow(null),
  backend: backendBinding.allow(null),
  content_type: Joi.string()
    .pattern(/^[\w.+-]+\/[\w.+-]+(\s*;.*)?$/)
    .allow(null)
    .messages({ 'string.pattern.base': 'must be a media type such as application/json' }),
  profile: Joi.string()
    .valid(...PROFILES)
    .allow(null),
  // Output-only fields, accepted so that a read can be sent back as a replace.
  points_resolved_at: dateTime().allow(null),
  created_at: dateTime(),
  delivery: Joi.object().unknown(true),
  offers: Joi.array(),
});

const deliveryOutput = Joi.object({
  mode: Joi.string().valid('own', 'delegated').required(),
  source_name: Joi.string().allow(null),
  delegation_id: Joi.string().allow(null),
  supplier_did: Joi.string().allow(null),
  supplier_name: Joi.string().allow(null),
  state: Joi.string().allow(null),
  active: Joi.boolean().allow(null),
  actions: Joi.array().items(Joi.string()).allow(null),
  valid_until: dateTime().allow(null),
  role: Joi.string().valid('delegator', 'delegate').allow(null),
  initiated_by: Joi.string().valid('delegator', 'delegate').allow(null),
  awaits_us: Joi.boolean().allow(null),
});

const productOutput = Joi.object({
  id: Joi.string().required(),
  title: Joi.string().required(),
  description: Joi.string().allow(null),
  keywords: Joi.array().items(Joi.string()),
  content_type: Joi.string(),
  profile: Joi.string(),
  building_id: Joi.string().allow(null),
  objects: Joi.array().items(Joi.string()),
  sort: Joi.string().allow(null),
  selection: selection,
  points: Joi.array().items(Joi.string()).allow(null),
  points_resolved_at: dateTime().allow(null),
  source_id: Joi.string().allow(null),
  backend: backendBinding.allow(null),
  delegation_id: Joi.string().allow(null),
  created_at: dateTime(),
  delivery: deliveryOutput.required(),
  offers: Joi.array().items(offerOutput),
});

function delivery(p: ProductRecord, source: SourceRecord | undefined) {
  return {
    mode: p.delegation_id ? ('delegated' as const) : ('own' as const),
    source_name: source?.name ?? null,
    delegation_id: p.delegation_id,
    supplier_did: null,
    supplier_name: null,
    state: p.delegation_id ? 'unknown' : null,
    active: null,
    actions: null,
    valid_until: null,
    role: null,
    initiated_by: null,
    awaits_us: null,
  };
}

export function presentProduct(p: ProductRecord, source: SourceRecord | undefined, offers?: OfferRecord[]) {
  return {
    id: p.id,
    title: p.title,
    description: p.description,
    keywords: p.keywords,
    content_type: p.content_type,
    profile: p.profile,
    building_id: p.objects[0] ?? null,
    objects: p.objects,
    sort: p.sort,
    selection: p.selection,
    points: p.points,
    points_resolved_at: p.points_resolved_at,
    source_id: p.source_id,
    // The binding that delivers it: its own, or its source's (keys masked either way).
    backend: p.backend ? maskedBinding(p.backend) : source?.backend ? maskedBinding(source.backend) : null,
    delegation_id: p.delegation_id,
    created_at: p.created_at,
    delivery: delivery(p, source),
    ...(offers ? { offers: offers.map(presentOffer) } : {}),
  };
}

/** The profile is settled by where the data comes from: links that only provide topology serve the topology profile. */
function deriveProfile(objects: string[], source: SourceRecord | undefined): string {
  if (!source) return DATA_PROFILE;
  const provides = objects.map((o) => (source.links[o] ?? defaultLink(o)).provides);
  return provides.length > 0 && provides.every((p) => p === 'topology') ? TOPOLOGY_PROFILE : DATA_PROFILE;
}

function deriveSort(profile: string, sel: Selection, objects: string[], points: string[] | null): string {
  if (profile === TOPOLOGY_PROFILE) return 'Building topology';
  const buildings = objects.length === 1 ? '1 building' : `${objects.length} buildings`;
  return sel.kind === 'points'
    ? `${points?.length ?? 0} selected points of ${buildings}`
    : `All points of ${buildings}`;
}

/**
 * A product's own (older) backend binding. It is part of how the product is delivered, so on a
 * replace it may only be sent back unchanged (its key masked) or left out.
 */
function ownBackend(input: BackendInput, stored: BackendBinding | null): BackendBinding {
  if (input.links)
    throw invalidRequest(
      'only sources have links; a product binding serves its objects as they are',
      'backend.links',
    );
  if (!input.allowed_methods?.length)
    throw invalidRequest('needs at least one method', 'backend.allowed_methods');
  if (!input.allowed_paths?.length)
    throw invalidRequest('needs at least one path pattern', 'backend.allowed_paths');
  let key = input.auth_header_value ?? null;
  if (isMasked(key)) {
    if (!stored?.auth_header_value)
      throw invalidRequest('is masked but no key is stored', 'backend.auth_header_value');
    if (!keyDestinationUnchanged(stored, input))
      throw invalidRequest(MASKED_KEY_MOVED, 'backend.auth_header_value');
    key = stored.auth_header_value;
  }
  return {
    base_url: input.base_url,
    auth_header_name: input.auth_header_name ?? null,
    auth_header_value: key,
    allowed_methods: input.allowed_methods,
    allowed_paths: input.allowed_paths,
  };
}

/** Field by field: stored bindings come back from jsonb with their keys reordered. */
const sameBinding = (a: BackendBinding, b: BackendBinding) =>
  a.base_url === b.base_url &&
  (a.auth_header_name ?? null) === (b.auth_header_name ?? null) &&
  (a.auth_header_value ?? null) === (b.auth_header_value ?? null) &&
  JSON.stringify(a.allowed_methods) === JSON.stringify(b.allowed_methods) &&
  JSON.stringify(a.allowed_paths) === JSON.stringify(b.allowed_paths);

/**
 * Reads the point lists of the product's objects from the backend and checks the chosen
 * points against them. Fails with `upstream_unavailable` when the backend cannot be read.
 */
async function resolvePoints(
  chosen: string[],
  objects: string[],
  source: SourceRecord | undefined,
  backend: BackendBinding | null,
) {
  const binding = source?.backend ?? backend;
  if (!binding)
    throw invalidRequest('a points selection needs a source or backend to read the points from', 'selection');
  if (source && source.protocol !== 'platform') {
    throw invalidRequest(
      `a points selection needs a platform-protocol source to list points; '${source.id}' is generic`,
      'selection',
    );
  }
  if (!binding.allowed_methods.includes('GET')) {
    throw invalidRequest(
      'a points selection needs a binding that allows GET, to list the points',
      'selection',
    );
  }
  const known = new Set<string>();
  for (const object of objects) {
    const link = source?.links[object] ?? defaultLink(object);
    try {
      for (const id of await listPointIds({ binding, link })) known.add(id);
    } catch (err) {
      if (!(err instanceof BackendCallError)) throw err;
      throw new ApiError(
        'upstream_unavailable',
        `the points of object '${object}' could not be read from ${source ? `source '${source.id}'` : 'the backend'}: ${err.message}`,
        { cause: err },
      );
    }
  }
  const missing = chosen.findIndex((p) => !known.has(p));
  if (missing >= 0)
    throw invalidRequest(`no point '${chosen[missing]}' in the product's objects`, `points[${missing}]`);
  return chosen;
}

/** Objects a product uses must be objects of its source; checked again under the source's lock. */
function checkServed(objects: string[], source: SourceRecord, input: ProductInput) {
  const notServed = objects.findIndex((o) => !source.objects.includes(o));
  if (notServed >= 0) {
    const field = input.objects?.length ? `objects[${notServed}]` : 'building_id';
    throw invalidRequest(`'${objects[notServed]}' is not an object of source '${source.id}'`, field);
  }
}

/**
 * Turns a request into the product to store. Reads (and, for a changed points selection, calls
 * the backend) outside any transaction: no lock is held while a remote system answers.
 */
async function buildProduct(
  db: Db,
  input: ProductInput,
  id: string,
  stored: ProductRecord | undefined,
): Promise<{ product: Omit<ProductRecord, 'created_at'>; source: SourceRecord | undefined }> {
  const objects = input.objects?.length ? input.objects : input.building_id ? [input.building_id] : [];
  if (objects.length === 0) throw invalidRequest('needs at least one object (or a building_id)', 'objects');

  // Delivery is settled at creation (exactly one way); a replace keeps it.
  let sourceId: string | null;
  let delegationId: string | null;
  let backend: BackendBinding | null;
  if (stored) {
    if (input.source_id && input.source_id !== stored.source_id) {
      throw invalidRequest(
        `the delivery of a product stays as it is; it is '${stored.source_id ?? 'its own backend'}'`,
        'source_id',
      );
    }
    if (input.delegation_id && input.delegation_id !== stored.delegation_id) {
      throw invalidRequest('is set at creation only', 'delegation_id');
    }
    sourceId = stored.source_id;
    delegationId = stored.delegation_id;
    backend = stored.backend;
    // For a source-delivered product the answer shows its source's binding: sending it back changes nothing.
    if (
      input.backend &&
      stored.backend &&
      !sameBinding(ownBackend(input.backend, stored.backend), stored.backend)
    ) {
      throw invalidRequest(
        'the delivery of a product stays as it is: send its backend back unchanged or leave it out',
        'backend',
      );
    }
  } else {
    sourceId = input.source_id ?? null;
    delegationId = input.delegation_id ?? null;
    const ways = [sourceId, input.backend, delegationId].filter((w) => w !== null && w !== undefined).length;
    if (ways === 0)
      throw invalidRequest(
        'a product needs a source that delivers it (source_id) or its own backend',
        'source_id',
      );
    if (ways > 1) {
      throw invalidRequest(
        'give one way of delivery: source_id, backend or delegation_id',
        input.backend ? 'backend' : 'delegation_id',
      );
    }
    // Delegations (deliveries by a supplier) arrive with the delegation feature; none exists yet.
    if (delegationId) throw invalidRequest(`no delegation '${delegationId}'`, 'delegation_id');
    backend = input.backend ? ownBackend(input.backend, null) : null;
  }

  let source: SourceRecord | undefined;
  if (sourceId) {
    source = await sourceStore(db).get(sourceId);
    if (!source) throw invalidRequest(`no source '${sourceId}'`, 'source_id');
    checkServed(objects, source, input);
  }

  const kind = input.selection?.kind ?? 'all';
  const chosen = input.points ?? input.selection?.points ?? null;
  let points: string[] | null = null;
  let resolvedAt: string | null = null;
  if (kind === 'points') {
    if (!chosen?.length) throw invalidRequest('a points selection needs at least one point', 'points');
    const unchanged =
      stored?.selection.kind === 'points' &&
      JSON.stringify(stored.points) === JSON.stringify(chosen) &&
      JSON.stringify(stored.objects) === JSON.stringify(objects);
    if (unchanged) {
      points = stored.points;
      resolvedAt = stored.points_resolved_at;
    } else {
      points = await resolvePoints(chosen, objects, source, backend);
      resolvedAt = toRfc3339(new Date());
    }
  } else if (chosen?.length) {
    throw invalidRequest('points are chosen by hand only with selection kind points', 'points');
  }

  const profile = input.profile ?? deriveProfile(objects, source);
  const sel: Selection = { kind };
  return {
    source,
    product: {
      id,
      title: input.title,
      description: input.description ?? null,
      keywords: input.keywords ?? [],
      objects,
      sort: input.sort ?? deriveSort(profile, sel, objects, points),
      selection: sel,
      points,
      points_resolved_at: resolvedAt,
      source_id: sourceId,
      delegation_id: delegationId,
      backend,
      content_type: input.content_type ?? 'application/json',
      profile,
    },
  };
}

/**
 * Writes a built product. FOR SHARE on its source: a concurrent change of the source cannot
 * drop an object this product is about to use (PUT sources locks the row FOR UPDATE).
 */
async function writeProduct(
  db: Db,
  built: Omit<ProductRecord, 'created_at'>,
  input: ProductInput,
  mode: 'insert' | 'replace',
) {
  return db.transaction(async (trx) => {
    if (built.source_id) {
      const locked: unknown = await trx('sources').where({ id: built.source_id }).forShare().first('id');
      const source = locked ? await sourceStore(trx).get(built.source_id) : undefined;
      if (!source) throw invalidRequest(`no source '${built.source_id}'`, 'source_id');
      checkServed(built.objects, source, input);
    }
    if (mode === 'insert') return productStore(trx).insert(built);
    if (!(await trx('products').where({ id: built.id }).forUpdate().first('id')))
      throw notFound('product', built.id);
    return productStore(trx).replace(built);
  });
}

export function productRoutes(services: Services) {
  const { db } = services;
  const sourceOf = async (p: ProductRecord) => (p.source_id ? sourceStore(db).get(p.source_id) : undefined);
  return [
    route<never, never, ProductInput>({
      method: 'post',
      path: '/products',
      summary: 'Create a product (its id is made from the title when left out)',
      tag: 'products',
      role: 'operator',
      body: productBody,
      response: productOutput,
      status: 201,
      errors: ['conflict', 'upstream_unavailable'],
      async handler({ body }) {
        const id = body.id ?? idFromName(body.title);
        if (!id) throw invalidRequest('gives no usable id; send an id', 'title');
        if (await productStore(db).exists(id)) throw conflict(`a product with id '${id}' already exists`);
        const { product, source } = await buildProduct(db, body, id, undefined);
        try {
          return presentProduct(await writeProduct(db, product, body, 'insert'), source);
        } catch (err) {
          if (isUniqueViolation(err)) throw conflict(`a product with id '${id}' already exists`);
          throw err;
        }
      },
    }),
    route<never, { cursor?: string; limit: number }>({
      method: 'get',
      path: '/products',
      summary: 'List products',
      tag: 'products',
      role: 'viewer',
      query: pageQuery,
      response: pageOf(productOutput),
      async handler({ query }) {
        const page = await productStore(db).list(toPageRequest(query));
        const items = [];
        for (const p of page.items) items.push(presentProduct(p, await sourceOf(p)));
        return { items, next_cursor: page.next_cursor };
      },
    }),
    route<{ id: string }>({
      method: 'get',
      path: '/products/:id',
      summary: 'Read a product with its offers',
      tag: 'products',
      role: 'viewer',
      params: idParams,
      response: productOutput,
      async handler({ params }) {
        const product = await productStore(db).get(params.id);
        if (!product) throw notFound('product', params.id);
        return presentProduct(product, await sourceOf(product), await offerStore(db).forProduct(product.id));
      },
    }),
    route<{ id: string }, never, ProductInput>({
      method: 'put',
      path: '/products/:id',
      summary:
        'Replace a product; its delivery stays as it is and an unchanged selection keeps its point list',
      tag: 'products',
      role: 'operator',
      params: idParams,
      body: productBody,
      response: productOutput,
      errors: ['upstream_unavailable'],
      async handler({ params, body }) {
        if (body.id && body.id !== params.id)
          throw invalidRequest(`must be '${params.id}' or left out`, 'id');
        const current = await productStore(db).get(params.id);
        if (!current) throw notFound('product', params.id);
        const { product, source } = await buildProduct(db, body, params.id, current);
        return presentProduct(await writeProduct(db, product, body, 'replace'), source);
      },
    }),
  ];
}
