/**
 * The buildings of the gateway bench, in the format of dev/building-backend/data/buildings.json:
 * a small one whose `/points` answer is about 2 KB and a large one whose answer is about 1 MiB.
 * Both are made of Soda Hall's real Brick points (the large one repeats them with numbered ids),
 * with Soda Hall's equipment, groups and locations, so the data plane's schema checks and
 * filters see real data.
 */
import fs from 'node:fs';
import path from 'node:path';
import { loadBuildings, type BuildingRecord, type BuildingsFile } from '../dev/building-backend/index.js';
import { toApiPoint } from '../dev/building-backend/points.js';

export const SMALL_ANSWER_BYTES = 2 * 1024;
export const LARGE_ANSWER_BYTES = 1024 * 1024;

export interface BenchBuildings {
  file: string;
  /** Local ids on the backend, and the `/points` answer size each was built for. */
  small: { localId: string; points: number; answerBytes: number };
  large: { localId: string; points: number; answerBytes: number };
}

/** Bytes of the backend's `/points` answer (no include) for these points. */
function answerBytes(localId: string, points: BuildingRecord['points']): number {
  return Buffer.byteLength(
    JSON.stringify({
      platform_version: '1.0',
      building_id: localId,
      generated_at: new Date(0).toISOString(),
      points: points.map(toApiPoint),
    }),
  );
}

/** The fewest points (cycled from `template`) whose answer reaches `bytes`; ids made unique. */
function pointsFor(localId: string, template: BuildingRecord['points'], bytes: number) {
  const points: BuildingRecord['points'] = [];
  let size = answerBytes(localId, []);
  for (let i = 0; size < bytes; i++) {
    const base = template[i % template.length]!;
    const round = Math.floor(i / template.length);
    const point = round === 0 ? base : { ...base, point_id: `${base.point_id}__${round}` };
    points.push(point);
    // One separator comma per point after the first.
    size += Buffer.byteLength(JSON.stringify(toApiPoint(point))) + (points.length > 1 ? 1 : 0);
  }
  return { points, size };
}

/** Writes the bench's buildings file into `dir`. */
export function writeBenchBuildings(dir: string): BenchBuildings {
  const soda = loadBuildings().buildings.find((b) => b.local_id === 'soda-hall');
  if (!soda) throw new Error('the sample data has no soda-hall');
  const building = (localId: string, bytes: number) => {
    const { points, size } = pointsFor(localId, soda.points, bytes);
    const record: BuildingRecord = { ...soda, local_id: localId, name: `Bench ${localId}`, points };
    return { record, info: { localId, points: points.length, answerBytes: size } };
  };
  const small = building('bench-small', SMALL_ANSWER_BYTES);
  const large = building('bench-large', LARGE_ANSWER_BYTES);
  const sample = loadBuildings();
  const data: BuildingsFile = {
    source: sample.source,
    generated_by: 'bench/gateway-buildings.ts from the sample data',
    brick_version: sample.brick_version,
    buildings: [small.record, large.record],
  };
  const file = path.join(dir, 'buildings.json');
  fs.writeFileSync(file, JSON.stringify(data));
  return { file, small: small.info, large: large.info };
}
