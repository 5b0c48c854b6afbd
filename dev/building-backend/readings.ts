/**
 * GET /v1/buildings/{building_id}/points/values: current values (spec "Gateway", values).
 * Every requested point lands in exactly one of `readings` or `unavailable`.
 */
import type { PointRecord, PointValue } from './building-data.js';
import { BackendError, PLATFORM_VERSION } from './errors.js';
import { queryList } from './points.js';
import { availabilityOf, sampleTime, simulatedValue } from './simulation.js';
import type { BuildingState } from './store.js';

export interface Reading {
  point_id: string;
  timestamp: string;
  value: PointValue;
  quality: 'ok' | 'stale';
}

export interface Unavailable {
  point_id: string;
  reason: 'no_data' | 'too_stale' | 'not_found' | 'forbidden';
}

export interface ValuesResponse {
  platform_version: string;
  building_id: string;
  readings: Reading[];
  unavailable: Unavailable[];
}

export function valuesResponse(building: BuildingState, pointIdsParam: unknown, now: number): ValuesResponse {
  const requested = requestedPointIds(building, pointIdsParam);
  const readings: Reading[] = [];
  const unavailable: Unavailable[] = [];
  for (const pointId of requested) {
    const point = building.pointsById.get(pointId);
    const outcome = point
      ? readPoint(building, point, now)
      : ({ point_id: pointId, reason: 'not_found' } as const);
    if ('reason' in outcome) unavailable.push(outcome);
    else readings.push(outcome);
  }
  return { platform_version: PLATFORM_VERSION, building_id: building.record.local_id, readings, unavailable };
}

/** The listed ids (each once, in order), or the whole building when the parameter is absent. */
function requestedPointIds(building: BuildingState, param: unknown): string[] {
  if (param === undefined) return building.record.points.map((p) => p.point_id);
  const ids = [...new Set(queryList(param))];
  if (ids.length === 0) {
    throw new BackendError('invalid_request', 'point_ids needs at least one id', { target: 'point_ids' });
  }
  return ids;
}

function readPoint(building: BuildingState, point: PointRecord, now: number): Reading | Unavailable {
  // A write-only point (a momentary command) has nothing to read back.
  if (point.access === 'write') return { point_id: point.point_id, reason: 'no_data' };
  const written = building.written.get(point.point_id);
  if (written) {
    return {
      point_id: point.point_id,
      timestamp: new Date(written.at).toISOString(),
      value: written.value,
      quality: 'ok',
    };
  }
  const availability = availabilityOf(point.point_id);
  if (availability === 'no_data') return { point_id: point.point_id, reason: 'no_data' };
  const at = sampleTime(point.point_id, availability, now);
  return {
    point_id: point.point_id,
    timestamp: new Date(at).toISOString(),
    value: simulatedValue(point, at),
    quality: availability === 'stale' ? 'stale' : 'ok',
  };
}
