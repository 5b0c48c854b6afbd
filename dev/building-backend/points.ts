/**
 * GET /v1/buildings/{building_id}/points: the building's point list, and its equipment, groups
 * and locations when `include` asks for them (spec "Gateway", points). The backend returns
 * every point; narrowing (class, access, flow_direction, point_ids, modified_since) is the
 * data plane's job, so those parameters are ignored here.
 */
import type { EquipmentRecord, GroupRecord, LocationRecord, PointRecord } from './building-data.js';
import { BackendError, PLATFORM_VERSION } from './errors.js';
import type { BuildingState } from './store.js';

const INCLUDES = ['equipment', 'groups', 'locations'] as const;
type Include = (typeof INCLUDES)[number];

/** A Point as the protocol shows it; `metadata_modified_at` is our extension for `modified_since`. */
export type ApiPoint = Omit<PointRecord, 'modified_at' | 'source_class' | 'simulation'> & {
  metadata_modified_at: string;
};

export interface PointsResponse {
  platform_version: string;
  building_id: string;
  generated_at: string;
  points: ApiPoint[];
  equipment?: EquipmentRecord[];
  groups?: GroupRecord[];
  locations?: LocationRecord[];
}

export function pointsResponse(building: BuildingState, includeParam: unknown, now: number): PointsResponse {
  const include = parseInclude(includeParam);
  const { record } = building;
  return {
    platform_version: PLATFORM_VERSION,
    building_id: record.local_id,
    generated_at: new Date(now).toISOString(),
    points: record.points.map(toApiPoint),
    ...(include.has('equipment') ? { equipment: record.equipment } : {}),
    ...(include.has('groups') ? { groups: record.groups } : {}),
    ...(include.has('locations') ? { locations: record.locations } : {}),
  };
}

export function toApiPoint(point: PointRecord): ApiPoint {
  const { modified_at, source_class: _source, simulation: _simulation, ...api } = point;
  return { ...api, metadata_modified_at: modified_at };
}

/** `include=equipment,locations` or `include=equipment&include=locations`. */
function parseInclude(param: unknown): Set<Include> {
  const values = queryList(param);
  for (const value of values) {
    if (!(INCLUDES as readonly string[]).includes(value)) {
      throw new BackendError('invalid_request', `include may hold ${INCLUDES.join(', ')}; got '${value}'`, {
        target: 'include',
      });
    }
  }
  return new Set(values as Include[]);
}

/** A query parameter given as a comma-separated list, repeated, or both; blanks dropped. */
export function queryList(param: unknown): string[] {
  const raw = Array.isArray(param) ? param : param === undefined ? [] : [param];
  return raw
    .flatMap((v) => String(v).split(','))
    .map((v) => v.trim())
    .filter((v) => v.length > 0);
}
