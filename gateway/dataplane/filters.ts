/**
 * The query of the two building endpoints (spec "Gateway"), parsed strictly, and the filters
 * the data plane applies itself so that every backend behaves the same: `class` (Brick class
 * closure), `access`, `flow_direction`, `point_ids`, `modified_since`, `include`, `max_age`.
 */
import { GatewayError } from '../errors.js';
import { parseDurationMs } from '../../domain/duration.js';
import { isRfc3339 } from '../../domain/time.js';
import type { BrickClassIndex } from '../brick/class-index.js';
import {
  ACCESS_VALUES,
  FLOW_DIRECTIONS,
  type Access,
  type Equipment,
  type FlowDirection,
  type Location,
  type Point,
} from '../schemas.js';

export const INCLUDES = ['equipment', 'groups', 'locations'] as const;
export type Include = (typeof INCLUDES)[number];

type Query = Record<string, string | string[] | undefined>;

const invalid = (target: string, message: string) =>
  new GatewayError('invalid_request', `${target}: ${message}`, { target });

function refuseUnknown(query: Query, known: readonly string[]): void {
  for (const name of Object.keys(query)) {
    // A misspelt filter must not silently widen the answer.
    if (!known.includes(name)) throw invalid(name, `unknown query parameter (known: ${known.join(', ')})`);
  }
}

function single(query: Query, name: string): string | undefined {
  const v = query[name];
  if (Array.isArray(v)) throw invalid(name, 'may be given once');
  return v;
}

/** A comma-separated list, repeated, or both; empty items dropped; at least one item when given. */
function list(query: Query, name: string): string[] | undefined {
  const v = query[name];
  if (v === undefined) return undefined;
  const items = (Array.isArray(v) ? v : [v])
    .flatMap((x) => x.split(','))
    .map((x) => x.trim())
    .filter((x) => x !== '');
  if (items.length === 0) throw invalid(name, 'needs at least one id');
  return [...new Set(items)];
}

/** What `class` selects: points of the class, points of equipment of the class, or points located in locations of the class. */
export interface ClassFilter {
  curie: string;
  members: ReadonlySet<string>;
  selects: 'points' | 'equipment' | 'locations';
}

export interface PointsQuery {
  class?: ClassFilter;
  access?: Access;
  flowDirection?: FlowDirection;
  pointIds?: string[];
  /** Epoch milliseconds. */
  modifiedSince?: number;
  include: Set<Include>;
}

export function parsePointsQuery(query: Query, brick: BrickClassIndex): PointsQuery {
  refuseUnknown(query, ['class', 'access', 'flow_direction', 'point_ids', 'modified_since', 'include']);
  const out: PointsQuery = { include: new Set() };

  const cls = single(query, 'class');
  if (cls !== undefined) out.class = classFilter(cls, brick);

  const access = single(query, 'access');
  if (access !== undefined) {
    if (!(ACCESS_VALUES as readonly string[]).includes(access))
      throw invalid('access', `must be one of ${ACCESS_VALUES.join(', ')}`);
    out.access = access as Access;
  }

  const flow = single(query, 'flow_direction');
  if (flow !== undefined) {
    if (!(FLOW_DIRECTIONS as readonly string[]).includes(flow))
      throw invalid('flow_direction', `must be one of ${FLOW_DIRECTIONS.join(', ')}`);
    out.flowDirection = flow as FlowDirection;
  }

  const ids = list(query, 'point_ids');
  if (ids) out.pointIds = ids;

  const since = single(query, 'modified_since');
  if (since !== undefined) {
    if (!isRfc3339(since))
      throw invalid('modified_since', 'must be an RFC 3339 date-time such as 2026-01-31T12:00:00Z');
    out.modifiedSince = Date.parse(since);
  }

  const include = query.include;
  if (include !== undefined) {
    const items = (Array.isArray(include) ? include : [include])
      .flatMap((x) => x.split(','))
      .map((x) => x.trim());
    for (const item of items) {
      if (!(INCLUDES as readonly string[]).includes(item))
        throw invalid('include', `may hold ${INCLUDES.join(', ')}; got '${item}'`);
      out.include.add(item as Include);
    }
  }
  return out;
}

export interface ValuesQuery {
  pointIds?: string[];
  maxAgeMs?: number;
}

export function parseValuesQuery(query: Query): ValuesQuery {
  refuseUnknown(query, ['point_ids', 'max_age']);
  const out: ValuesQuery = {};
  const ids = list(query, 'point_ids');
  if (ids) out.pointIds = ids;
  const maxAge = single(query, 'max_age');
  if (maxAge !== undefined) {
    const ms = parseDurationMs(maxAge);
    if (ms === null)
      throw invalid('max_age', 'must be an ISO 8601 duration with W, D, H, M, S only, e.g. PT15M');
    out.maxAgeMs = ms;
  }
  return out;
}

/**
 * A Brick class CURIE (or an IRI in Brick's or RealEstateCore's namespace): the class and
 * everything beneath it, aliases and deprecated names mapped to today's classes. An unknown
 * class is a client error, never an empty list (research/gateway.md §1.4).
 */
export function classFilter(value: string, brick: BrickClassIndex): ClassFilter {
  const curie = brick.toCurie(value);
  if (curie === undefined || !brick.isKnown(curie))
    throw invalid(
      'class',
      `'${value}' is not a Brick ${brick.version} class (e.g. brick:Temperature_Sensor)`,
    );
  const kinds = brick.kindsOf(curie);
  const selects = brick.isEquipmentOrSystem(curie)
    ? 'equipment'
    : kinds.has('location') && !kinds.has('point')
      ? 'locations'
      : 'points';
  return { curie, members: brick.descendantsOf(curie), selects };
}

/** The includes the backend must be asked for: the requested ones and what the class filter needs. */
export function backendIncludes(q: PointsQuery): Set<Include> {
  const needed = new Set(q.include);
  if (q.class?.selects === 'equipment') needed.add('equipment');
  if (q.class?.selects === 'locations') needed.add('locations');
  return needed;
}

const ACCESS_SATISFIES: Record<Access, readonly Access[]> = {
  read: ['read', 'read_write'],
  write: ['write', 'read_write'],
  read_write: ['read_write'],
};

/** Locations of the given ids and every location inside them (following part_of). */
function within(locations: Location[], roots: Set<string>): Set<string> {
  const inside = new Set(roots);
  let grew = true;
  while (grew) {
    grew = false;
    for (const l of locations) {
      if (!inside.has(l.location_id) && l.part_of !== undefined && inside.has(l.part_of)) {
        inside.add(l.location_id);
        grew = true;
      }
    }
  }
  return inside;
}

/**
 * Applies the filters to the covered points. `modified_since` keeps points whose
 * `metadata_modified_at` is after it; a point without that date is kept, so a client that
 * synchronises by date never misses a change it cannot be told about.
 */
export function selectPoints(
  points: Point[],
  q: PointsQuery,
  context: { brick: BrickClassIndex; equipment?: Equipment[]; locations?: Location[] },
): Point[] {
  const { brick } = context;
  let keep: (p: Point) => boolean = () => true;
  if (q.class) {
    const { members, selects } = q.class;
    const classOf = (c: string) => brick.toCurie(c) ?? c;
    if (selects === 'equipment') {
      const ids = new Set(
        (context.equipment ?? []).filter((e) => members.has(classOf(e.class))).map((e) => e.equipment_id),
      );
      keep = (p) => p.equipment_id !== undefined && ids.has(p.equipment_id);
    } else if (selects === 'locations') {
      const all = context.locations ?? [];
      const roots = new Set(all.filter((l) => members.has(classOf(l.class))).map((l) => l.location_id));
      const ids = within(all, roots);
      keep = (p) => p.location_id !== undefined && ids.has(p.location_id);
    } else {
      keep = (p) => members.has(classOf(p.class));
    }
  }
  const ids = q.pointIds ? new Set(q.pointIds) : undefined;
  const access = q.access ? ACCESS_SATISFIES[q.access] : undefined;
  return points.filter(
    (p) =>
      (!ids || ids.has(p.point_id)) &&
      (!access || access.includes(p.access)) &&
      (!q.flowDirection || p.flow_direction === q.flowDirection) &&
      (q.modifiedSince === undefined ||
        p.metadata_modified_at === undefined ||
        Date.parse(p.metadata_modified_at) > q.modifiedSince) &&
      keep(p),
  );
}
