/**
 * The gateway schemas of the spec ("Point (gateway)", Equipment, Group, Location, Reading,
 * Unavailable entry), checked on the way out of the data plane so that no backend can make us
 * break them. Each reader returns a clean copy (the spec's fields only, plus documented
 * extensions) or throws a ShapeError naming the field.
 *
 * Hand-written rather than joi: they run on every point of every answer (a building has
 * hundreds), on the hot path of the gateway, and plain checks are tens of times cheaper.
 */
import { parseDurationMs } from '../domain/duration.js';
import { isRfc3339 } from '../domain/time.js';
import { PLATFORM_VERSION_PATTERN } from './errors.js';

export class ShapeError extends Error {
  constructor(
    readonly path: string,
    message: string,
  ) {
    super(`${path}: ${message}`);
    this.name = 'ShapeError';
  }
}

export const ACCESS_VALUES = ['read', 'write', 'read_write'] as const;
export type Access = (typeof ACCESS_VALUES)[number];
export const VALUE_TYPES = ['number', 'integer', 'boolean', 'string'] as const;
export type ValueType = (typeof VALUE_TYPES)[number];
export const FLOW_DIRECTIONS = [
  'consumption',
  'production',
  'delivery',
  'return_delivery',
  'charge',
  'discharge',
] as const;
export type FlowDirection = (typeof FLOW_DIRECTIONS)[number];
export const UNAVAILABLE_REASONS = ['no_data', 'too_stale', 'not_found', 'forbidden'] as const;
export type UnavailableReason = (typeof UNAVAILABLE_REASONS)[number];

/** prefix:local (prefix of letters, digits, _ and -; local part also dots) or an http(s) IRI. */
const CURIE = /^[A-Za-z0-9_-]+:[A-Za-z0-9_.-]+$/;
const IRI = /^https?:\/\/[^\s<>"{}|\\^`]+$/;
export const isCurieOrIri = (v: string): boolean => CURIE.test(v) || IRI.test(v);

export interface Constraints {
  min?: number;
  max?: number;
  step?: number;
  minimum_interval?: string;
}

export interface Point {
  point_id: string;
  name: string;
  class: string;
  access: Access;
  value_type: ValueType;
  is_cumulative: boolean;
  unit?: string;
  constraints?: Constraints;
  flow_direction?: FlowDirection;
  equipment_id?: string;
  location_id?: string;
  /** Extension: when the point's metadata last changed; `modified_since` is judged by it. */
  metadata_modified_at?: string;
}

export interface Quantity {
  value: number;
  unit?: string;
}

export interface Equipment {
  equipment_id: string;
  class: string;
  name?: string;
  is_fed_by?: string | string[];
  location_id?: string;
  capacity?: Partial<
    Record<'rated_power_output' | 'rated_power_input' | 'rated_max_current_input' | 'phase_count', Quantity>
  >;
}

export interface Group {
  group_id: string;
  name?: string;
  equipment_ids: string[];
}

export interface Location {
  location_id: string;
  name: string;
  class: string;
  part_of?: string;
}

export type PointValue = number | boolean | string;

export interface Reading {
  point_id: string;
  timestamp: string;
  value: PointValue;
  quality: 'ok' | 'stale';
}

export interface Unavailable {
  point_id: string;
  reason: UnavailableReason;
}

type Obj = Record<string, unknown>;

/*
 * The checks take the parent's path and the field's key apart and join them only to report a
 * problem: building `points[12].value_type` for every field of every point would cost more than
 * the checks themselves.
 */
const at = (path: string, key?: string): string => (key === undefined ? path : `${path}.${key}`);

function object(v: unknown, path: string, key?: string): Obj {
  if (v === null || typeof v !== 'object' || Array.isArray(v))
    throw new ShapeError(at(path, key), 'must be an object');
  return v as Obj;
}

function string(v: unknown, path: string, key?: string, min = 0): string {
  if (typeof v !== 'string') throw new ShapeError(at(path, key), 'must be a string');
  if (v.length < min) throw new ShapeError(at(path, key), `must have at least ${min} character`);
  return v;
}

function oneOf<T extends string>(v: unknown, values: readonly T[], path: string, key?: string): T {
  if (typeof v !== 'string' || !(values as readonly string[]).includes(v))
    throw new ShapeError(at(path, key), `must be one of ${values.join(', ')}`);
  return v as T;
}

/**
 * Strings already found valid. Classes, units and intervals repeat across the thousands of
 * points of a building, so each distinct value is checked once (bounded: cleared when full).
 */
class ValidValues {
  private readonly values = new Set<string>();

  check(value: string, valid: (value: string) => boolean): boolean {
    if (this.values.has(value)) return true;
    if (!valid(value)) return false;
    if (this.values.size >= 4_096) this.values.clear();
    this.values.add(value);
    return true;
  }
}
const curiesOrIris = new ValidValues();
const intervals = new ValidValues();
const isInterval = (d: string) => parseDurationMs(d) !== null;

function curieOrIri(v: unknown, path: string, key?: string): string {
  const s = string(v, path, key, 1);
  if (!curiesOrIris.check(s, isCurieOrIri))
    throw new ShapeError(at(path, key), 'must be a CURIE (prefix:local) or an http(s) IRI');
  return s;
}

function finite(v: unknown, path: string, key?: string): number {
  if (typeof v !== 'number' || !Number.isFinite(v)) throw new ShapeError(at(path, key), 'must be a number');
  return v;
}

function bool(v: unknown, path: string, key?: string): boolean {
  if (typeof v !== 'boolean') throw new ShapeError(at(path, key), 'must be a boolean');
  return v;
}

function dateTime(v: unknown, path: string, key?: string): string {
  if (typeof v !== 'string' || !isRfc3339(v))
    throw new ShapeError(at(path, key), 'must be an RFC 3339 date-time');
  return v;
}

function array(v: unknown, path: string, key?: string): unknown[] {
  if (!Array.isArray(v)) throw new ShapeError(at(path, key), 'must be an array');
  return v;
}

const has = (o: Obj, key: string): boolean => o[key] !== undefined && o[key] !== null;

function readConstraints(v: unknown, path: string): Constraints {
  const o = object(v, path);
  const out: Constraints = {};
  if (has(o, 'min')) out.min = finite(o.min, path, 'min');
  if (has(o, 'max')) out.max = finite(o.max, path, 'max');
  if (has(o, 'step')) {
    out.step = finite(o.step, path, 'step');
    if (out.step <= 0) throw new ShapeError(at(path, 'step'), 'must be greater than 0');
  }
  if (has(o, 'minimum_interval')) {
    const d = string(o.minimum_interval, path, 'minimum_interval');
    if (!intervals.check(d, isInterval))
      throw new ShapeError(
        at(path, 'minimum_interval'),
        'must be an ISO 8601 duration with W, D, H, M, S only',
      );
    out.minimum_interval = d;
  }
  return out;
}

export function readPoint(v: unknown, path: string): Point {
  const o = object(v, path);
  const valueType = oneOf(o.value_type, VALUE_TYPES, path, 'value_type');
  const point: Point = {
    point_id: string(o.point_id, path, 'point_id', 1),
    name: string(o.name, path, 'name'),
    class: curieOrIri(o.class, path, 'class'),
    access: oneOf(o.access, ACCESS_VALUES, path, 'access'),
    value_type: valueType,
    is_cumulative: bool(o.is_cumulative, path, 'is_cumulative'),
  };
  if (has(o, 'unit')) point.unit = curieOrIri(o.unit, path, 'unit');
  else if (valueType === 'number' || valueType === 'integer')
    throw new ShapeError(at(path, 'unit'), 'is required for a numeric point');
  if (has(o, 'constraints')) point.constraints = readConstraints(o.constraints, at(path, 'constraints'));
  if (has(o, 'flow_direction'))
    point.flow_direction = oneOf(o.flow_direction, FLOW_DIRECTIONS, path, 'flow_direction');
  if (has(o, 'equipment_id')) point.equipment_id = string(o.equipment_id, path, 'equipment_id');
  if (has(o, 'location_id')) point.location_id = string(o.location_id, path, 'location_id', 1);
  if (has(o, 'metadata_modified_at'))
    point.metadata_modified_at = dateTime(o.metadata_modified_at, path, 'metadata_modified_at');
  return point;
}

function readQuantity(v: unknown, path: string): Quantity {
  const o = object(v, path);
  const q: Quantity = { value: finite(o.value, path, 'value') };
  if (has(o, 'unit')) q.unit = curieOrIri(o.unit, path, 'unit');
  return q;
}

const RATINGS = [
  'rated_power_output',
  'rated_power_input',
  'rated_max_current_input',
  'phase_count',
] as const;

export function readEquipment(v: unknown, path: string): Equipment {
  const o = object(v, path);
  const e: Equipment = {
    equipment_id: string(o.equipment_id, path, 'equipment_id', 1),
    class: curieOrIri(o.class, path, 'class'),
  };
  if (has(o, 'name')) e.name = string(o.name, path, 'name');
  if (has(o, 'is_fed_by')) {
    e.is_fed_by = Array.isArray(o.is_fed_by)
      ? o.is_fed_by.map((x, i) => string(x, `${path}.is_fed_by[${i}]`, undefined, 1))
      : string(o.is_fed_by, path, 'is_fed_by', 1);
  }
  if (has(o, 'location_id')) e.location_id = string(o.location_id, path, 'location_id', 1);
  if (has(o, 'capacity')) {
    const c = object(o.capacity, path, 'capacity');
    e.capacity = {};
    for (const rating of RATINGS)
      if (has(c, rating)) e.capacity[rating] = readQuantity(c[rating], `${path}.capacity.${rating}`);
  }
  return e;
}

export function readGroup(v: unknown, path: string): Group {
  const o = object(v, path);
  const g: Group = {
    group_id: string(o.group_id, path, 'group_id', 1),
    equipment_ids: array(o.equipment_ids, path, 'equipment_ids').map((x, i) =>
      string(x, `${path}.equipment_ids[${i}]`, undefined, 1),
    ),
  };
  if (has(o, 'name')) g.name = string(o.name, path, 'name');
  return g;
}

export function readLocation(v: unknown, path: string): Location {
  const o = object(v, path);
  const l: Location = {
    location_id: string(o.location_id, path, 'location_id', 1),
    name: string(o.name, path, 'name'),
    class: string(o.class, path, 'class', 1),
  };
  if (has(o, 'part_of')) l.part_of = string(o.part_of, path, 'part_of', 1);
  return l;
}

export function fitsValueType(valueType: ValueType, value: unknown): value is PointValue {
  switch (valueType) {
    case 'number':
      return typeof value === 'number' && Number.isFinite(value);
    case 'integer':
      return typeof value === 'number' && Number.isInteger(value);
    case 'boolean':
      return typeof value === 'boolean';
    case 'string':
      return typeof value === 'string';
  }
}

const QUALITIES = ['ok', 'stale'] as const;

/** A reading's own shape; whether its value fits the point's value_type is checked by the caller. */
export function readReading(v: unknown, path: string): Reading {
  const o = object(v, path);
  const value = o.value;
  if (
    !(typeof value === 'number' && Number.isFinite(value)) &&
    typeof value !== 'boolean' &&
    typeof value !== 'string'
  )
    throw new ShapeError(at(path, 'value'), 'must be a number, boolean or string');
  return {
    point_id: string(o.point_id, path, 'point_id', 1),
    timestamp: dateTime(o.timestamp, path, 'timestamp'),
    value,
    quality: oneOf(o.quality, QUALITIES, path, 'quality'),
  };
}

export function readUnavailable(v: unknown, path: string): Unavailable {
  const o = object(v, path);
  return {
    point_id: string(o.point_id, path, 'point_id', 1),
    reason: oneOf(o.reason, UNAVAILABLE_REASONS, path, 'reason'),
  };
}

/** The envelope of every success answer: a 1.x platform version (a 2.x backend is not ours to pass). */
export function readEnvelope(v: unknown): Obj & { platform_version: string } {
  const o = object(v, 'body');
  const version = string(o.platform_version, 'platform_version');
  if (!PLATFORM_VERSION_PATTERN.test(version)) throw new ShapeError('platform_version', 'must be 1.x');
  return o as Obj & { platform_version: string };
}

export interface PointsAnswer {
  platform_version: string;
  generated_at: string;
  points: Point[];
  equipment?: Equipment[];
  groups?: Group[];
  locations?: Location[];
}

export function readPointsAnswer(v: unknown): PointsAnswer {
  const o = readEnvelope(v);
  const out: PointsAnswer = {
    platform_version: o.platform_version,
    generated_at: dateTime(o.generated_at, 'generated_at'),
    points: array(o.points, 'points').map((p, i) => readPoint(p, `points[${i}]`)),
  };
  if (has(o, 'equipment'))
    out.equipment = array(o.equipment, 'equipment').map((e, i) => readEquipment(e, `equipment[${i}]`));
  if (has(o, 'groups')) out.groups = array(o.groups, 'groups').map((g, i) => readGroup(g, `groups[${i}]`));
  if (has(o, 'locations'))
    out.locations = array(o.locations, 'locations').map((l, i) => readLocation(l, `locations[${i}]`));
  return out;
}

/**
 * A values answer. Entries that break the schema are returned apart (`broken`) rather than
 * failing the whole answer: one faulty sensor must not hide a building's other values.
 */
export function readValuesAnswer(v: unknown): {
  platform_version: string;
  readings: Reading[];
  unavailable: Unavailable[];
  broken: Array<{ point_id: string | null; problem: string }>;
} {
  const o = readEnvelope(v);
  const broken: Array<{ point_id: string | null; problem: string }> = [];
  const readings: Reading[] = [];
  const unavailable: Unavailable[] = [];
  const pointIdOf = (x: unknown) => {
    const id = (x as { point_id?: unknown } | null)?.point_id;
    return typeof id === 'string' && id !== '' ? id : null;
  };
  array(o.readings, 'readings').forEach((r, i) => {
    try {
      readings.push(readReading(r, `readings[${i}]`));
    } catch (err) {
      if (!(err instanceof ShapeError)) throw err;
      broken.push({ point_id: pointIdOf(r), problem: err.message });
    }
  });
  array(o.unavailable, 'unavailable').forEach((u, i) => {
    try {
      unavailable.push(readUnavailable(u, `unavailable[${i}]`));
    } catch (err) {
      if (!(err instanceof ShapeError)) throw err;
      broken.push({ point_id: pointIdOf(u), problem: err.message });
    }
  });
  return { platform_version: o.platform_version, readings, unavailable, broken };
}
