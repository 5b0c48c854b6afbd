/**
 * Reads one Brick example model (SODA Hall, Rice Hall) into a small graph of points, equipment
 * and locations with Brick 1.4 classes. The models predate Brick 1.1: some types use the
 * 1.0.2 namespace or names that were renamed since, Rice types some points as a substance plus
 * a quantity, and a few nodes are only referenced, never typed. Every such case is mapped by
 * an explicit table below so that a reviewer can check each decision.
 */
import { Parser } from 'n3';
import type { BrickClassIndex, BrickKind } from '../../gateway/brick/class-index.js';
import { NS } from './ontology.js';

const BRICK_102 = 'https://brickschema.org/schema/1.0.2/Brick#';
/** Brick's own vocabularies (classes, frame, tags), current and 1.0.2; SODA's data namespace is also under brickschema.org. */
const BRICK_VOCABULARY = /^https:\/\/brickschema\.org\/schema\/(1\.0\.2\/)?(Brick|BrickFrame|BrickTag)#/;

/** Pre-1.1 names found in the two models → Brick 1.4 class (before alias/deprecation resolution). */
const LEGACY_CLASSES: Record<string, string> = {
  Fan_Speed_Reset_Command: 'brick:Speed_Reset_Command',
  Smoke_Detected_Alarm: 'brick:Smoke_Detection_Alarm',
  Heating_On_Off_Status: 'brick:Heating_Start_Stop_Status',
  // SOD__BLD_1_KWD: the building's kW demand.
  Energy_Demand: 'brick:Peak_Demand_Sensor',
  Outside_Air_Temperature: 'brick:Outside_Air_Temperature_Sensor',
  Outside_Air_Humidity: 'brick:Outside_Air_Humidity_Sensor',
  VAV_Box_Operating_Mode: 'brick:Operating_Mode_Status',
  Supply_Air_Duct_Max_Position_Setpoint: 'brick:Max_Position_Setpoint_Limit',
  // Brick 1.4 has no dew-point economizer commands; the generic parents keep their meaning.
  Economizer_Disable_Fixed_Dew_Point: 'brick:Disable_Command',
  Economizer_Enable_Fixed_Dew_Point: 'brick:Enable_Command',
  PreHeat_Coil_Leaving_Air_Temperature_Sensor: 'brick:Preheat_Supply_Air_Temperature_Sensor',
  Freeze_Protect_Low_Limit: 'brick:Low_Freeze_Protect_Temperature_Parameter',
};

/** Rice types some points as substance + quantity (Brick 1.0 style); key is the sorted local names. */
const SUBSTANCE_QUANTITY: Record<string, string> = {
  'Chilled_Return_Water+Temperature': 'brick:Chilled_Water_Return_Temperature_Sensor',
  'Chilled_Discharge_Water+Temperature': 'brick:Chilled_Water_Supply_Temperature_Sensor',
  'Discharge_Air+Flow': 'brick:Supply_Air_Flow_Sensor',
};

/**
 * Rice types 54 points as brick 1.0.2 `Unknown`. Their names are descriptive enough for a
 * coarse class; anything not matched stays a plain brick:Point.
 */
const UNKNOWN_BY_NAME: [RegExp, string][] = [
  [/alarm|failure|unable/i, 'brick:Alarm'],
  [/stpt|setpoint/i, 'brick:Temperature_Setpoint'],
  [/offset|difference/i, 'brick:Temperature_Parameter'],
  [/water|gly/i, 'brick:Water_Temperature_Sensor'],
  [/air|cdq/i, 'brick:Air_Temperature_Sensor'],
  [/temp/i, 'brick:Temperature_Sensor'],
];

/** Nodes that are only referenced (Rice AHU_5..8 feed VAVs; SODA rooms are part of floor_o). */
const UNTYPED_BY_NAME: [RegExp, string][] = [
  [/^ahu[_\d]/i, 'brick:AHU'],
  [/^vav[_\d]/i, 'brick:VAV'],
  [/^floor_/i, 'brick:Floor'],
];

/** Brick relations, each stored in one direction (the inverse form is turned around). */
export type Relation = 'hasPoint' | 'feeds' | 'hasPart' | 'hasLocation';
const RELATIONS: Record<string, { relation: Relation; inverse: boolean }> = {
  hasPoint: { relation: 'hasPoint', inverse: false },
  isPointOf: { relation: 'hasPoint', inverse: true },
  feeds: { relation: 'feeds', inverse: false },
  isFedBy: { relation: 'feeds', inverse: true },
  hasPart: { relation: 'hasPart', inverse: false },
  isPartOf: { relation: 'hasPart', inverse: true },
  hasLocation: { relation: 'hasLocation', inverse: false },
  isLocationOf: { relation: 'hasLocation', inverse: true },
};

export type EntityKind = 'point' | 'equipment' | 'location';

export interface ModelEntity {
  iri: string;
  /** The IRI's local name: the stable id in the derived data. */
  id: string;
  name: string;
  kind: EntityKind;
  /** Brick 1.4 class as CURIE. */
  class: string;
  /** What the model said, for provenance (e.g. `brick_v_1_0_2:Unknown`, `brick:Chilled_Return_Water+brick:Temperature`). */
  sourceClass: string;
  /** How the class was found: as given, via the legacy table, by name, … (for the derivation report). */
  mapping: 'as_given' | 'legacy_name' | 'substance_quantity' | 'by_name' | 'untyped_by_name';
}

export interface ModelEdge {
  subject: string;
  relation: Relation;
  object: string;
}

export interface BuildingModel {
  label: string | undefined;
  entities: Map<string, ModelEntity>;
  edges: ModelEdge[];
  /** Nodes that could not be classified, with their types, for the derivation report. */
  skipped: string[];
}

export function readBuildingModel(turtle: string, index: BrickClassIndex): BuildingModel {
  const quads = new Parser().parse(turtle);
  const types = new Map<string, string[]>();
  const labels = new Map<string, string>();
  const rawEdges: ModelEdge[] = [];
  for (const q of quads) {
    const s = q.subject.value;
    const p = q.predicate.value;
    if (p === `${NS.rdf}type`) pushTo(types, s, q.object.value);
    else if (p === `${NS.rdfs}label`) labels.set(s, q.object.value);
    else if (p.startsWith(NS.brick) && q.object.termType === 'NamedNode') {
      const rel = RELATIONS[p.slice(NS.brick.length)];
      if (rel)
        rawEdges.push(
          rel.inverse
            ? { subject: q.object.value, relation: rel.relation, object: s }
            : { subject: s, relation: rel.relation, object: q.object.value },
        );
    }
  }

  const entities = new Map<string, ModelEntity>();
  const skipped: string[] = [];
  const referenced = new Set(rawEdges.flatMap((e) => [e.subject, e.object]));
  for (const iri of new Set([...types.keys(), ...referenced])) {
    // The Rice model declares stub classes (brick_v_1_0_2:X a brick:Point); they are not entities.
    if (BRICK_VOCABULARY.test(iri)) continue;
    const resolved = resolveClass(iri, types.get(iri) ?? [], index);
    const kind = resolved ? entityKind(index.kindsOf(resolved.class)) : undefined;
    if (!resolved || !kind) {
      skipped.push(`${localName(iri)} (${(types.get(iri) ?? ['untyped']).map(shortIri).join(', ')})`);
      continue;
    }
    const id = localName(iri);
    // Ids are local names; two namespaces using the same one would make them ambiguous.
    if ([...entities.values()].some((e) => e.id === id)) throw new Error(`two entities share the id '${id}'`);
    entities.set(iri, { iri, id, name: labels.get(iri) ?? humanize(id), kind, ...resolved });
  }

  const buildingLabel = [...entities.values()].find((e) => e.class === 'brick:Building')?.iri;
  return {
    label: buildingLabel ? labels.get(buildingLabel) : undefined,
    entities,
    edges: rawEdges.filter((e) => entities.has(e.subject) && entities.has(e.object)),
    skipped: skipped.sort(),
  };
}

type Resolved = Pick<ModelEntity, 'class' | 'sourceClass' | 'mapping'>;

function resolveClass(iri: string, typeIris: string[], index: BrickClassIndex): Resolved | undefined {
  const brickTypes = typeIris.filter((t) => t.startsWith(NS.brick) || t.startsWith(BRICK_102));
  const sourceClass = brickTypes.map(shortIri).sort().join('+');
  if (brickTypes.length === 0) {
    const byName = UNTYPED_BY_NAME.find(([pattern]) => pattern.test(localName(iri)));
    return byName
      ? { class: currentBrickClass(byName[1], index), sourceClass: 'untyped', mapping: 'untyped_by_name' }
      : undefined;
  }

  const names = brickTypes.map(localName);
  const combined = SUBSTANCE_QUANTITY[[...names].sort().join('+')];
  if (combined)
    return { class: currentBrickClass(combined, index), sourceClass, mapping: 'substance_quantity' };

  const candidates: Resolved[] = [];
  for (const name of names) {
    if (name === 'Unknown') {
      const byName = UNKNOWN_BY_NAME.find(([pattern]) => pattern.test(localName(iri)))?.[1] ?? 'brick:Point';
      candidates.push({ class: currentBrickClass(byName, index), sourceClass, mapping: 'by_name' });
    } else if (index.isKnown(`brick:${name}`)) {
      candidates.push({ class: currentBrickClass(`brick:${name}`, index), sourceClass, mapping: 'as_given' });
    } else if (LEGACY_CLASSES[name]) {
      candidates.push({
        class: currentBrickClass(LEGACY_CLASSES[name], index),
        sourceClass,
        mapping: 'legacy_name',
      });
    }
  }
  // With several types, keep the most specific one (the one beneath all the others).
  return (
    candidates.find((c) => candidates.every((other) => index.isA(c.class, other.class))) ?? candidates[0]
  );
}

/**
 * Follows aliases and deprecations while they stay in the brick: namespace. Brick 1.4 deprecates
 * its location classes in favour of RealEstateCore (brick:Floor → rec:Level); we keep Brick
 * CURIEs for locations, as research §1.5 recommends, and the class index still resolves them.
 */
export function currentBrickClass(curie: string, index: BrickClassIndex): string {
  if (!index.isKnown(curie)) throw new Error(`mapping table names a class Brick does not have: ${curie}`);
  const seen = new Set([curie]);
  let current = curie;
  for (
    let next = index.successorOf(current);
    next?.startsWith('brick:') && !seen.has(next);
    next = index.successorOf(current)
  ) {
    seen.add(next);
    current = next;
  }
  return current;
}

function entityKind(kinds: ReadonlySet<BrickKind>): EntityKind | undefined {
  if (kinds.has('point')) return 'point';
  if (kinds.has('equipment') || kinds.has('system') || kinds.has('loop')) return 'equipment';
  if (kinds.has('location')) return 'location';
  return undefined;
}

export function localName(iri: string): string {
  const cut = Math.max(iri.lastIndexOf('#'), iri.lastIndexOf('/'));
  return iri.slice(cut + 1);
}

function shortIri(iri: string): string {
  if (iri.startsWith(NS.brick)) return `brick:${iri.slice(NS.brick.length)}`;
  if (iri.startsWith(BRICK_102)) return `brick_v_1_0_2:${iri.slice(BRICK_102.length)}`;
  return iri;
}

/** Abbreviations building engineers write in capitals. */
const ACRONYMS = /\b(ahu|vav|hvac|cfm|chw|hw|oat|rat|occpy|curtl)\b/gi;

/** `temp_sensor_hvac_zone_C300` → `temp sensor HVAC zone C300`. */
function humanize(id: string): string {
  return (
    id
      .replace(/_+/g, ' ')
      .trim()
      .replace(ACRONYMS, (word) => word.toUpperCase()) || id
  );
}

function pushTo(map: Map<string, string[]>, key: string, value: string): void {
  const list = map.get(key);
  if (list) list.push(value);
  else map.set(key, [value]);
}
