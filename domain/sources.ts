/**
 * Sources and their backend binding (spec "Source", "Backend binding", "Link"): the rules for
 * links and defaults, masking of keys, and the effective paths a binding lets through.
 */
import { invalidRequest } from './errors.js';
import { MASK, isMasked } from './masking.js';

export const PROTOCOLS = ['platform', 'generic'] as const;
export type Protocol = (typeof PROTOCOLS)[number];
export const PROVIDES = ['data', 'topology', 'both'] as const;
export type Provides = (typeof PROVIDES)[number];

/** A link as stored: every field resolved (defaults filled in). */
export interface LinkDetail {
  local_id: string;
  auth_header_value: string | null;
  provides: Provides;
}

export interface LinkInput {
  local_id?: string | null;
  auth_header_value?: string | null;
  provides?: Provides | null;
}

export interface BackendBinding {
  base_url: string;
  auth_header_name: string | null;
  auth_header_value: string | null;
  allowed_methods: string[];
  allowed_paths: string[];
}

export interface BackendInput {
  base_url: string;
  auth_header_name?: string | null;
  auth_header_value?: string | null;
  allowed_methods?: string[];
  allowed_paths?: string[];
  links?: Record<string, LinkInput>;
}

export interface SourceRecord {
  id: string;
  name: string;
  protocol: Protocol;
  health_path: string | null;
  objects: string[];
  backend: BackendBinding | null;
  /** object id → link detail, for every object of the source. */
  links: Record<string, LinkDetail>;
  created_at: string;
}

/**
 * A masked key sent back keeps the stored key only while it would still go where it went:
 * the same origin and the same header. Otherwise a changed base_url could send the stored
 * secret to another host, so the caller must send the key again.
 */
export function keyDestinationUnchanged(
  before: Pick<BackendBinding, 'base_url' | 'auth_header_name'> | null | undefined,
  after: { base_url: string; auth_header_name?: string | null },
): boolean {
  if (!before) return false;
  const origin = (u: string) => new URL(u).origin;
  return (
    origin(before.base_url) === origin(after.base_url) &&
    (before.auth_header_name ?? '').toLowerCase() === (after.auth_header_name ?? '').toLowerCase()
  );
}

export const MASKED_KEY_MOVED =
  'is masked, but the key would now go elsewhere (base_url origin or auth_header_name changed): send the key again';

export const defaultLink = (object: string): LinkDetail => ({
  local_id: object,
  auth_header_value: null,
  provides: 'data',
});

/**
 * Merges the two forms of links (array of Link, map on the binding) into one resolved detail
 * per object. A masked per-link key keeps what was stored for that object.
 */
export function resolveLinks(
  objects: string[],
  linkArray: Array<LinkInput & { object: string }> | undefined,
  linkMap: Record<string, LinkInput> | undefined,
  stored: Record<string, LinkDetail> = {},
  /** False when the binding's destination changed: masked per-link keys are then refused. */
  keepMaskedKeys = true,
): Record<string, LinkDetail> {
  const given = new Map<string, { input: LinkInput; field: string }>();
  (linkArray ?? []).forEach((link, i) => {
    if (given.has(link.object))
      throw invalidRequest(`object '${link.object}' is linked twice`, `links[${i}].object`);
    given.set(link.object, { input: link, field: `links[${i}]` });
  });
  for (const [object, input] of Object.entries(linkMap ?? {})) {
    const field = `backend.links.${object}`;
    const earlier = given.get(object);
    if (earlier && JSON.stringify(normalizeInput(earlier.input)) !== JSON.stringify(normalizeInput(input))) {
      throw invalidRequest(`differs from ${earlier.field} for the same object`, field);
    }
    given.set(object, { input, field });
  }
  for (const [object, { field }] of given) {
    if (!objects.includes(object))
      throw invalidRequest(`'${object}' is not one of the source's objects`, `${field}`);
  }
  const links: Record<string, LinkDetail> = {};
  for (const object of objects) {
    const entry = given.get(object);
    const base = defaultLink(object);
    if (!entry) {
      links[object] = base;
      continue;
    }
    const { input, field } = entry;
    let key: string | null = input.auth_header_value ?? null;
    if (isMasked(key)) {
      const kept = stored[object]?.auth_header_value;
      if (!kept)
        throw invalidRequest('is masked but no key is stored for this object', `${field}.auth_header_value`);
      if (!keepMaskedKeys) throw invalidRequest(MASKED_KEY_MOVED, `${field}.auth_header_value`);
      key = kept;
    }
    links[object] = {
      local_id: input.local_id ?? base.local_id,
      auth_header_value: key,
      provides: input.provides ?? base.provides,
    };
  }
  return links;
}

function normalizeInput(input: LinkInput): LinkInput {
  return {
    local_id: input.local_id ?? null,
    auth_header_value: input.auth_header_value ?? null,
    provides: input.provides ?? null,
  };
}

/** What differs from the defaults, for output (only links that differ are listed). */
function linkDifference(object: string, link: LinkDetail): Partial<LinkDetail> | null {
  const d: Partial<LinkDetail> = {};
  if (link.local_id !== object) d.local_id = link.local_id;
  if (link.auth_header_value !== null) d.auth_header_value = MASK;
  if (link.provides !== 'data') d.provides = link.provides;
  return Object.keys(d).length === 0 ? null : d;
}

export function linksForOutput(links: Record<string, LinkDetail>) {
  const array: Array<Partial<LinkDetail> & { object: string }> = [];
  const map: Record<string, Partial<LinkDetail>> = {};
  for (const [object, link] of Object.entries(links)) {
    const d = linkDifference(object, link);
    if (!d) continue;
    array.push({ object, ...d });
    map[object] = d;
  }
  return { array, map };
}

export function maskedBinding(binding: BackendBinding): BackendBinding {
  return { ...binding, auth_header_value: binding.auth_header_value === null ? null : MASK };
}

/** The paths a platform-protocol source's links open: `v1/buildings/{local id}/**` each. */
export function linkPaths(links: Record<string, LinkDetail>): string[] {
  return Object.values(links).map((l) => `v1/buildings/${l.local_id}/**`);
}

/**
 * The allowed paths in force: on a platform source the links fill them (plus any given);
 * an empty list lets nothing through.
 */
export function effectiveAllowedPaths(
  source: Pick<SourceRecord, 'protocol' | 'backend' | 'links'>,
): string[] {
  const explicit = source.backend?.allowed_paths ?? [];
  return source.protocol === 'platform' ? [...new Set([...explicit, ...linkPaths(source.links)])] : explicit;
}

/** The objects that a change of a source drops. */
export const droppedObjects = (before: string[], after: string[]): string[] =>
  before.filter((o) => !after.includes(o));
