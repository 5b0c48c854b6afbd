/**
 * Shape of data/buildings.json: what the sample backend knows about its buildings. Written by
 * dev/brick/derive.ts from the Brick example models, read by the backend at start.
 *
 * The API fields follow the spec's Point / Equipment / Group / Location (connector-spec.md,
 * "Point (gateway)"). `modified_at` and `simulation` are the backend's own bookkeeping: the
 * first is exposed as the extension field `metadata_modified_at`, the second never leaves it.
 */
import { readFileSync } from 'node:fs';

export type Access = 'read' | 'write' | 'read_write';
export type ValueType = 'number' | 'integer' | 'boolean' | 'string';
export type FlowDirection =
  'consumption' | 'production' | 'delivery' | 'return_delivery' | 'charge' | 'discharge';
export type PointValue = number | boolean | string;

export interface PointConstraints {
  min?: number;
  max?: number;
  step?: number;
  /** ISO 8601 duration with W, D, H, M, S only. */
  minimum_interval?: string;
}

/** How the backend makes values move over time; deterministic in point id and time. */
export type Simulation =
  | { kind: 'wave'; base: number; amplitude: number }
  | { kind: 'counter'; start: number; per_hour: number }
  | { kind: 'toggle' }
  | { kind: 'states'; states: string[] };

export interface PointRecord {
  point_id: string;
  name: string;
  class: string;
  access: Access;
  value_type: ValueType;
  is_cumulative: boolean;
  unit?: string;
  constraints?: PointConstraints;
  flow_direction?: FlowDirection;
  equipment_id?: string;
  location_id?: string;
  /** When the point's metadata last changed (RFC 3339). */
  modified_at: string;
  /** The type(s) the example model gave, before mapping to Brick 1.4 (provenance only). */
  source_class: string;
  simulation: Simulation;
}

export interface Quantity {
  value: number;
  unit?: string;
}

export interface EquipmentRecord {
  equipment_id: string;
  class: string;
  name: string;
  is_fed_by?: string[];
  location_id?: string;
  capacity?: {
    rated_power_output?: Quantity;
    rated_power_input?: Quantity;
    rated_max_current_input?: Quantity;
    phase_count?: Quantity;
  };
}

export interface GroupRecord {
  group_id: string;
  name: string;
  equipment_ids: string[];
}

export interface LocationRecord {
  location_id: string;
  name: string;
  class: string;
  part_of?: string;
}

export interface BuildingRecord {
  /** The backend's own id of the building (a link's local_id in the connector). */
  local_id: string;
  name: string;
  points: PointRecord[];
  equipment: EquipmentRecord[];
  groups: GroupRecord[];
  locations: LocationRecord[];
}

export interface BuildingsFile {
  source: string;
  generated_by: string;
  brick_version: string;
  buildings: BuildingRecord[];
}

export const DEFAULT_BUILDINGS_URL = new URL('./data/buildings.json', import.meta.url);

export function loadBuildings(file: string | URL = DEFAULT_BUILDINGS_URL): BuildingsFile {
  return JSON.parse(readFileSync(file, 'utf8')) as BuildingsFile;
}
