/**
 * The backend's in-memory state: the buildings from buildings.json, indexed by id, plus the
 * values written through /setpoints (they win over the simulation until the process ends).
 */
import type { BuildingRecord, BuildingsFile, PointRecord, PointValue } from './building-data.js';

export interface WrittenValue {
  value: PointValue;
  /** Epoch milliseconds of the write; the reading's timestamp afterwards. */
  at: number;
}

export interface BuildingState {
  record: BuildingRecord;
  pointsById: Map<string, PointRecord>;
  written: Map<string, WrittenValue>;
}

export type BuildingStore = Map<string, BuildingState>;

export function createStore(file: BuildingsFile): BuildingStore {
  return new Map(
    file.buildings.map((record) => [
      record.local_id,
      { record, pointsById: new Map(record.points.map((p) => [p.point_id, p])), written: new Map() },
    ]),
  );
}
