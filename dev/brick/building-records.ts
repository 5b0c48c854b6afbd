/**
 * Turns one building model (points, equipment, locations and Brick relations) into the
 * backend's records: which equipment a point belongs to, where things are, what feeds what,
 * and one group per air handling unit.
 */
import type { BrickClassIndex } from '../../gateway/brick/class-index.js';
import type {
  BuildingRecord,
  EquipmentRecord,
  GroupRecord,
  LocationRecord,
  PointRecord,
} from '../building-backend/building-data.js';
import { stableHash } from '../building-backend/simulation.js';
import type { BuildingModel, ModelEntity, Relation } from './building-model.js';
import type { BrickOntology } from './ontology.js';
import { pointProfile } from './point-profile.js';

/** A point id travels in a comma-separated query parameter and in URLs: keep it plain. */
const SAFE_ID = /^[A-Za-z0-9_.-]+$/;

/** Metadata change times spread over this window, so that `modified_since` splits the points. */
const MODIFIED_FROM_MS = Date.UTC(2025, 5, 1);
const MODIFIED_SPAN_S = 500 * 24 * 3600;

export interface BuildingIdentity {
  localId: string;
  name: string;
}

export function buildingRecord(
  identity: BuildingIdentity,
  model: BuildingModel,
  index: BrickClassIndex,
  ontology: BrickOntology,
): BuildingRecord {
  const graph = new Graph(model);
  const building = findBuilding(model, index);
  const locations = locationRecords(graph, building, index);
  const equipment = equipmentRecords(graph, building, index);
  const equipmentById = new Map(equipment.map((e) => [e.equipment_id, e]));
  const points = pointRecords(identity, graph, building, equipmentById, index, ontology);
  return {
    local_id: identity.localId,
    name: model.label ?? identity.name,
    points,
    equipment,
    groups: groupRecords(graph, index),
    locations,
  };
}

/** Edges by relation, looked up from either end, with entities instead of IRIs. */
class Graph {
  readonly entities: ModelEntity[];
  private readonly out = new Map<string, ModelEntity[]>();
  private readonly in = new Map<string, ModelEntity[]>();

  constructor(model: BuildingModel) {
    this.entities = [...model.entities.values()].sort((a, b) => a.id.localeCompare(b.id));
    for (const edge of model.edges) {
      const subject = model.entities.get(edge.subject);
      const object = model.entities.get(edge.object);
      if (!subject || !object) continue;
      add(this.out, `${edge.relation} ${subject.iri}`, object);
      add(this.in, `${edge.relation} ${object.iri}`, subject);
    }
  }

  of(kind: ModelEntity['kind']): ModelEntity[] {
    return this.entities.filter((e) => e.kind === kind);
  }

  /** Objects of `subject relation ?`. */
  targets(subject: ModelEntity, relation: Relation): ModelEntity[] {
    return this.out.get(`${relation} ${subject.iri}`) ?? [];
  }

  /** Subjects of `? relation object`. */
  sources(object: ModelEntity, relation: Relation): ModelEntity[] {
    return this.in.get(`${relation} ${object.iri}`) ?? [];
  }
}

function findBuilding(model: BuildingModel, index: BrickClassIndex): ModelEntity {
  const buildings = [...model.entities.values()].filter((e) => index.isA(e.class, 'brick:Building'));
  const [building] = buildings;
  if (!building || buildings.length > 1)
    throw new Error(`expected exactly one brick:Building, found ${buildings.length}`);
  return building;
}

/**
 * A room may be part of a floor and of an HVAC zone at once; `part_of` holds one parent, and
 * the physical one (floor, then building) is the one a reader expects. A zone takes the floor
 * its rooms share. Everything else hangs off the building, so the tree is connected.
 */
function locationRecords(graph: Graph, building: ModelEntity, index: BrickClassIndex): LocationRecord[] {
  const isFloor = (e: ModelEntity): boolean => index.isA(e.class, 'brick:Floor');
  const parentOf = (e: ModelEntity): ModelEntity | undefined => {
    const parents = graph.sources(e, 'hasPart').filter((p) => p.kind === 'location');
    return parents.find(isFloor) ?? parents.find((p) => p === building) ?? parents[0];
  };
  return graph.of('location').map((location) => {
    let parent: ModelEntity | undefined;
    if (location !== building) {
      const sharedFloor = isFloor(location)
        ? undefined
        : sharedFloorOfParts(location, graph, isFloor, parentOf);
      parent = parentOf(location) ?? sharedFloor ?? building;
    }
    return {
      location_id: location.id,
      name: location.name,
      class: location.class,
      ...(parent ? { part_of: parent.id } : {}),
    };
  });
}

function sharedFloorOfParts(
  zone: ModelEntity,
  graph: Graph,
  isFloor: (e: ModelEntity) => boolean,
  parentOf: (e: ModelEntity) => ModelEntity | undefined,
): ModelEntity | undefined {
  const floors = new Set(
    graph
      .targets(zone, 'hasPart')
      .map(parentOf)
      .filter((p): p is ModelEntity => p !== undefined && isFloor(p)),
  );
  return floors.size === 1 ? [...floors][0] : undefined;
}

function equipmentRecords(graph: Graph, building: ModelEntity, index: BrickClassIndex): EquipmentRecord[] {
  return graph.of('equipment').map((equipment) => {
    const fedBy = graph
      .sources(equipment, 'feeds')
      .filter((e) => e.kind === 'equipment')
      .map((e) => e.id);
    const location = equipmentLocation(equipment, graph) ?? building;
    const capacity = syntheticCapacity(equipment, index);
    return {
      equipment_id: equipment.id,
      class: equipment.class,
      name: equipment.name,
      ...(fedBy.length > 0 ? { is_fed_by: fedBy } : {}),
      location_id: location.id,
      ...(capacity ? { capacity } : {}),
    };
  });
}

/**
 * Stated location first (hasLocation, or a location that has it as part); otherwise the one
 * zone it feeds, which is where a VAV box sits. Without either it is still in the building.
 */
function equipmentLocation(equipment: ModelEntity, graph: Graph): ModelEntity | undefined {
  const stated = [...graph.targets(equipment, 'hasLocation'), ...graph.sources(equipment, 'hasPart')].find(
    (e) => e.kind === 'location',
  );
  if (stated) return stated;
  const served = graph.targets(equipment, 'feeds').filter((e) => e.kind === 'location');
  return served.length === 1 ? served[0] : undefined;
}

/**
 * SYNTHETIC: the example models carry no nameplate data. Fans and air handling units get
 * plausible ratings (standard IEC motor sizes, 400 V three-phase, cos φ 0.9) so that the
 * `capacity` object can be exercised; they describe no real machine.
 */
function syntheticCapacity(equipment: ModelEntity, index: BrickClassIndex): EquipmentRecord['capacity'] {
  const isFan = index.isA(equipment.class, 'brick:Fan');
  const isAhu = index.isA(equipment.class, 'brick:Air_Handling_Unit');
  if (!isFan && !isAhu) return undefined;
  const sizes = isFan ? [5.5, 7.5, 11, 15, 18.5, 22] : [30, 37, 45, 55, 75];
  const inputKw = sizes[stableHash(`capacity/${equipment.id}`) % sizes.length] ?? 11;
  const currentA = (inputKw * 1000) / (Math.sqrt(3) * 400 * 0.9);
  return {
    rated_power_input: { value: inputKw, unit: 'unit:KiloW' },
    ...(isFan
      ? { rated_power_output: { value: Math.round(inputKw * 0.88 * 10) / 10, unit: 'unit:KiloW' } }
      : {}),
    rated_max_current_input: { value: Math.round(currentA * 10) / 10, unit: 'unit:A' },
    phase_count: { value: 3 },
  };
}

/** One group per air handling unit: the unit, its parts (fans) and the equipment it feeds. */
function groupRecords(graph: Graph, index: BrickClassIndex): GroupRecord[] {
  return graph
    .of('equipment')
    .filter((e) => index.isA(e.class, 'brick:Air_Handling_Unit'))
    .map((ahu) => {
      const parts = [...graph.targets(ahu, 'hasPart'), ...graph.sources(ahu, 'hasLocation')];
      const fed = graph.targets(ahu, 'feeds');
      const members = [ahu, ...parts, ...fed].filter((e) => e.kind === 'equipment').map((e) => e.id);
      return {
        group_id: `${ahu.id}_system`,
        name: `${ahu.name} and the equipment it serves`,
        equipment_ids: [...new Set(members)],
      };
    });
}

function pointRecords(
  identity: BuildingIdentity,
  graph: Graph,
  building: ModelEntity,
  equipmentById: Map<string, EquipmentRecord>,
  index: BrickClassIndex,
  ontology: BrickOntology,
): PointRecord[] {
  return graph.of('point').map((point) => {
    if (!SAFE_ID.test(point.id)) throw new Error(`point id not usable in a query list: ${point.id}`);
    // hasPoint is the relation; SODA's AHU A3 "feeds" its alarm points, which means the same.
    const owners = [...graph.sources(point, 'hasPoint'), ...graph.sources(point, 'feeds')];
    const equipment = owners.find((e) => e.kind === 'equipment');
    const statedLocation = [...graph.targets(point, 'hasLocation'), ...owners].find(
      (e) => e.kind === 'location',
    );
    const locationId =
      statedLocation?.id ??
      (equipment ? equipmentById.get(equipment.id)?.location_id : undefined) ??
      building.id;
    const profile = pointProfile(
      {
        class: point.class,
        id: point.id,
        onTerminalUnit: equipment !== undefined && index.isA(equipment.class, 'brick:Terminal_Unit'),
      },
      index,
      ontology,
    );
    const { family: _family, ...apiProfile } = profile;
    return {
      point_id: point.id,
      name: point.name,
      class: point.class,
      access: apiProfile.access,
      value_type: apiProfile.value_type,
      is_cumulative: apiProfile.is_cumulative,
      ...(apiProfile.unit ? { unit: apiProfile.unit } : {}),
      ...(apiProfile.constraints ? { constraints: apiProfile.constraints } : {}),
      ...(apiProfile.flow_direction ? { flow_direction: apiProfile.flow_direction } : {}),
      ...(equipment ? { equipment_id: equipment.id } : {}),
      location_id: locationId,
      modified_at: modifiedAt(`${identity.localId}/${point.id}`),
      source_class: point.sourceClass,
      simulation: apiProfile.simulation,
    };
  });
}

/** A deterministic, well-spread metadata change time (whole seconds, UTC). */
function modifiedAt(key: string): string {
  const offsetS = stableHash(`modified/${key}`) % MODIFIED_SPAN_S;
  return new Date(MODIFIED_FROM_MS + offsetS * 1000).toISOString().replace('.000Z', 'Z');
}

function add(map: Map<string, ModelEntity[]>, key: string, value: ModelEntity): void {
  const list = map.get(key);
  if (list) {
    if (!list.includes(value)) list.push(value);
  } else map.set(key, [value]);
}
