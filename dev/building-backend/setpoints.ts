/**
 * POST /v1/buildings/{building_id}/setpoints with `{setpoints: [{point_id, value}]}`.
 * The write is all or nothing: every entry is checked first, and the first refusal answers for
 * the whole request with its `target` (e.g. `setpoints[1].value`), as the spec's "a write refused
 * as a whole" asks. `minimum_interval` is published but not enforced by this sample backend.
 */
import type { PointRecord, PointValue } from './building-data.js';
import { BackendError, PLATFORM_VERSION } from './errors.js';
import type { BuildingState } from './store.js';

export interface AcceptedSetpoint {
  point_id: string;
  value: PointValue;
  timestamp: string;
}

export interface SetpointsResponse {
  platform_version: string;
  building_id: string;
  accepted: AcceptedSetpoint[];
}

interface SetpointRequest {
  point_id: string;
  value: unknown;
}

export function applySetpoints(building: BuildingState, body: unknown, now: number): SetpointsResponse {
  const requests = parseBody(body);
  const checked = requests.map((request, i) => checkSetpoint(building, request, `setpoints[${i}]`));
  const timestamp = new Date(now).toISOString();
  for (const { point_id, value } of checked) building.written.set(point_id, { value, at: now });
  return {
    platform_version: PLATFORM_VERSION,
    building_id: building.record.local_id,
    accepted: checked.map(({ point_id, value }) => ({ point_id, value, timestamp })),
  };
}

function parseBody(body: unknown): SetpointRequest[] {
  const setpoints = isObject(body) ? body.setpoints : undefined;
  if (!Array.isArray(setpoints) || setpoints.length === 0) {
    throw new BackendError(
      'invalid_request',
      'body must be {"setpoints": [{"point_id", "value"}, ...]} with at least one entry',
      {
        target: 'setpoints',
      },
    );
  }
  return setpoints.map((entry: unknown, i) => {
    if (!isObject(entry) || typeof entry.point_id !== 'string' || entry.point_id.length === 0) {
      throw new BackendError('invalid_request', 'each setpoint needs a point_id string', {
        target: `setpoints[${i}].point_id`,
      });
    }
    if (!('value' in entry)) {
      throw new BackendError('invalid_request', 'each setpoint needs a value', {
        target: `setpoints[${i}].value`,
      });
    }
    return { point_id: entry.point_id, value: entry.value };
  });
}

function checkSetpoint(
  building: BuildingState,
  request: SetpointRequest,
  at: string,
): { point_id: string; value: PointValue } {
  const point = building.pointsById.get(request.point_id);
  if (!point)
    throw new BackendError('point_not_found', `no point '${request.point_id}' in this building`, {
      target: `${at}.point_id`,
    });
  if (point.access === 'read') {
    throw new BackendError('point_not_writable', `point '${point.point_id}' is read-only`, {
      target: `${at}.point_id`,
    });
  }
  const value = checkType(point, request.value, `${at}.value`);
  checkRange(point, value, `${at}.value`);
  return { point_id: point.point_id, value };
}

function checkType(point: PointRecord, value: unknown, target: string): PointValue {
  if (!fitsValueType(point.value_type, value)) {
    throw new BackendError(
      'type_mismatch',
      `point '${point.point_id}' takes a ${point.value_type}, got ${describe(value)}`,
      { target },
    );
  }
  return value;
}

function fitsValueType(valueType: PointRecord['value_type'], value: unknown): value is PointValue {
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

function checkRange(point: PointRecord, value: PointValue, target: string): void {
  const c = point.constraints;
  if (!c || typeof value !== 'number') return;
  const refuse = (why: string): never => {
    throw new BackendError('value_out_of_range', `${value} is ${why} for point '${point.point_id}'`, {
      target,
    });
  };
  if (c.min !== undefined && value < c.min) refuse(`below the minimum ${c.min}`);
  if (c.max !== undefined && value > c.max) refuse(`above the maximum ${c.max}`);
  if (c.step !== undefined) {
    const steps = (value - (c.min ?? 0)) / c.step;
    // Tolerance for binary fractions: 21.5 with step 0.1 must pass.
    if (Math.abs(steps - Math.round(steps)) > 1e-6) refuse(`not on the step grid of ${c.step}`);
  }
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function describe(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  return typeof value === 'number' && Number.isInteger(value) ? 'an integer' : `a ${typeof value}`;
}
