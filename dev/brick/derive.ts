/**
 * `npm run derive:brick`: derives the two JSON files the connector ships from the pinned Brick
 * release and two of its example models. The Turtle files stay outside the project (they are
 * large and not ours); only the derived data and Brick's BSD-3 licence file are kept here.
 *
 *   gateway/brick/class-index.json          class DAG, aliases, deprecations (gateway class filter)
 *   dev/building-backend/data/buildings.json  SODA Hall and Rice Hall for the sample backend
 *
 * Input directory: ../shared/data/brick next to the project, or BRICK_DATA_DIR.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createBrickClassIndex, type BrickClassIndexFile } from '../../gateway/brick/class-index.js';
import type { BuildingRecord, BuildingsFile } from '../building-backend/building-data.js';
import { buildingRecord, type BuildingIdentity } from './building-records.js';
import { readBuildingModel, type BuildingModel } from './building-model.js';
import { BRICK_SOURCE_NOTICE, parseBrickOntology } from './ontology.js';

const projectRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const dataDir = process.env.BRICK_DATA_DIR ?? path.resolve(projectRoot, '../shared/data/brick');

const ONTOLOGY_FILE = 'Brick-1.4.ttl';
const LICENSE_FILE = 'LICENSE-Brick.txt';
const BUILDINGS: (BuildingIdentity & { file: string })[] = [
  { file: 'soda_brick.ttl', localId: 'soda-hall', name: 'Soda Hall' },
  { file: 'rice_brick.ttl', localId: 'rice-hall', name: 'Rice Hall' },
];

const OUTPUT = {
  classIndex: path.join(projectRoot, 'gateway/brick/class-index.json'),
  buildings: path.join(projectRoot, 'dev/building-backend/data/buildings.json'),
  license: path.join(projectRoot, 'dev/brick', LICENSE_FILE),
};

function main(): void {
  const ontology = parseBrickOntology(readInput(ONTOLOGY_FILE));
  const index = createBrickClassIndex(ontology.index);

  const buildings: BuildingRecord[] = BUILDINGS.map((b) => {
    const model = readBuildingModel(readInput(b.file), index);
    report(b.localId, model);
    return buildingRecord(b, model, index, ontology);
  });

  const buildingsFile: BuildingsFile = {
    source: BRICK_SOURCE_NOTICE,
    generated_by: 'npm run derive:brick (dev/brick/derive.ts)',
    brick_version: ontology.index.brick_version,
    buildings,
  };

  writeJson(OUTPUT.classIndex, classIndexJson(ontology.index));
  writeJson(OUTPUT.buildings, buildingsJson(buildingsFile));
  // Read and write rather than copy: the source may be read-only and copyFileSync keeps its mode.
  writeFileSync(OUTPUT.license, readInput(LICENSE_FILE));

  console.log(
    `classes in index: ${Object.keys(ontology.index.classes).length} (Brick ${ontology.index.brick_version})`,
  );
  for (const b of buildings) {
    console.log(
      `${b.local_id}: ${b.points.length} points, ${b.equipment.length} equipment, ${b.groups.length} groups, ${b.locations.length} locations`,
    );
  }
}

function readInput(name: string): string {
  return readFileSync(path.join(dataDir, name), 'utf8');
}

function writeJson(file: string, text: string): void {
  mkdirSync(path.dirname(file), { recursive: true });
  writeFileSync(file, `${text}\n`);
  console.log(`wrote ${path.relative(projectRoot, file)} (${Buffer.byteLength(text)} bytes)`);
}

/** One record per line: small diffs when the derivation changes, and half the size of pretty JSON. */
function buildingsJson(file: BuildingsFile): string {
  const list = (items: unknown[]): string =>
    `[\n${items.map((i) => `    ${JSON.stringify(i)}`).join(',\n')}\n   ]`;
  const buildings = file.buildings.map((b) => {
    const { points, equipment, groups, locations, ...head } = b;
    const headJson = Object.entries(head).map(([k, v]) => `   ${JSON.stringify(k)}: ${JSON.stringify(v)}`);
    const lists = Object.entries({ points, equipment, groups, locations }).map(
      ([k, v]) => `   ${JSON.stringify(k)}: ${list(v)}`,
    );
    return `  {\n${[...headJson, ...lists].join(',\n')}\n  }`;
  });
  const { buildings: _, ...header } = file;
  const headerJson = Object.entries(header).map(([k, v]) => ` ${JSON.stringify(k)}: ${JSON.stringify(v)}`);
  return `{\n${[...headerJson, ` "buildings": [\n${buildings.join(',\n')}\n ]`].join(',\n')}\n}`;
}

/** One class, alias or deprecation per line, like buildings.json. */
function classIndexJson(index: BrickClassIndexFile): string {
  const entries = Object.entries(index).map(([key, value]) => {
    const isMap = key === 'classes' || key === 'aliases' || key === 'deprecated';
    if (!isMap) return ` ${JSON.stringify(key)}: ${JSON.stringify(value)}`;
    const lines = Object.entries(value as Record<string, unknown>).map(
      ([k, v]) => `  ${JSON.stringify(k)}: ${JSON.stringify(v)}`,
    );
    return ` ${JSON.stringify(key)}: {\n${lines.join(',\n')}\n }`;
  });
  return `{\n${entries.join(',\n')}\n}`;
}

/** What the mapping tables did, so that a change in the models or in Brick shows up in the log. */
function report(localId: string, model: BuildingModel): void {
  const byMapping = new Map<string, Map<string, number>>();
  for (const e of model.entities.values()) {
    if (e.mapping === 'as_given' && e.sourceClass === e.class) continue;
    const key = `${e.sourceClass} -> ${e.class}`;
    const counts = byMapping.get(e.mapping) ?? new Map<string, number>();
    counts.set(key, (counts.get(key) ?? 0) + 1);
    byMapping.set(e.mapping, counts);
  }
  console.log(`\n${localId}: classes mapped`);
  for (const [mapping, counts] of byMapping) {
    for (const [key, n] of [...counts].sort())
      console.log(`  ${mapping.padEnd(18)} ${String(n).padStart(4)}  ${key}`);
  }
  if (model.skipped.length > 0)
    console.log(`  skipped (not a point, equipment or location): ${model.skipped.join('; ')}`);
}

main();
