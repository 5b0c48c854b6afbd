/**
 * Reads the pinned Brick release (Brick-1.4.ttl, which merges RealEstateCore 4) and reduces it
 * to what the connector needs: the class DAG, aliases, deprecations and the branch each class
 * sits under. The quantity of each class is kept for the derivation of units only and is not
 * written to the index.
 */
import { Parser, type Quad } from 'n3';
import type { BrickClassIndexFile, BrickDeprecation, BrickKind } from '../../gateway/brick/class-index.js';

export const NS = {
  brick: 'https://brickschema.org/schema/Brick#',
  rec: 'https://w3id.org/rec#',
  rdf: 'http://www.w3.org/1999/02/22-rdf-syntax-ns#',
  rdfs: 'http://www.w3.org/2000/01/rdf-schema#',
  owl: 'http://www.w3.org/2002/07/owl#',
  qudtqk: 'http://qudt.org/vocab/quantitykind/',
} as const;

/** The index keeps Brick's own classes and the REC classes Brick 1.4 merges in (locations moved there). */
const INDEX_PREFIXES = { brick: NS.brick, rec: NS.rec } as const;

/**
 * Branch roots. Since Brick 1.3 System and Loop sit under Collection, not Equipment
 * (research §1.3); rec:Space is the root of REC's spatial branch and brick:Location is beneath it.
 */
const ROOTS: Record<BrickKind, string[]> = {
  point: ['brick:Point'],
  equipment: ['brick:Equipment'],
  system: ['brick:System'],
  loop: ['brick:Loop'],
  collection: ['brick:Collection'],
  location: ['brick:Location', 'rec:Space'],
};

export const BRICK_SOURCE_NOTICE =
  'Derived from Brick Schema 1.4 and example models (BSD-3-Clause, see LICENSE-Brick.txt in the Brick distribution)';

export interface BrickOntology {
  index: BrickClassIndexFile;
  /** brick:hasQuantity per class, as CURIE-like strings (qudtqk:Temperature, brick:Differential_Pressure). */
  quantities: Map<string, string[]>;
  /** skos:broader of Brick's own quantities, to reach a QUDT kind from e.g. brick:Differential_Pressure. */
  broaderQuantity: Map<string, string>;
}

export function parseBrickOntology(turtle: string): BrickOntology {
  const quads = new Parser().parse(turtle);
  const curie = (iri: string): string | undefined => toCurie(iri, INDEX_PREFIXES);

  const classNames = collectClasses(quads, curie);
  const parents = new Map<string, string[]>([...classNames].map((c) => [c, []]));
  const aliases: Record<string, string> = {};
  const deprecatedFlags = new Set<string>();
  const replacedBy = new Map<string, string>();
  const deprecatedSince = new Map<string, string>();
  const quantities = new Map<string, string[]>();
  const broaderQuantity = new Map<string, string>();
  let version = 'unknown';

  for (const q of quads) {
    const subject = curie(q.subject.value);
    const object = q.object.termType === 'NamedNode' ? curie(q.object.value) : undefined;
    switch (q.predicate.value) {
      case `${NS.rdfs}subClassOf`:
        // Blank-node objects are OWL restrictions, not parents; parents outside the index
        // (sosa:, skos:, qudt:) add nothing to a Brick class filter.
        if (subject && object && classNames.has(subject) && classNames.has(object))
          parents.get(subject)?.push(object);
        break;
      case `${NS.brick}aliasOf`:
        if (subject && object && classNames.has(subject) && classNames.has(object)) aliases[subject] = object;
        break;
      case `${NS.owl}deprecated`:
        if (subject && classNames.has(subject) && q.object.value === 'true') deprecatedFlags.add(subject);
        break;
      case `${NS.brick}isReplacedBy`:
        if (subject && object && classNames.has(object)) replacedBy.set(subject, object);
        break;
      case `${NS.brick}deprecatedInVersion`:
        if (subject) deprecatedSince.set(subject, q.object.value);
        break;
      case `${NS.brick}hasQuantity`:
        if (subject) push(quantities, subject, quantityName(q.object.value));
        break;
      case 'http://www.w3.org/2004/02/skos/core#broader':
        if (q.subject.value.startsWith(NS.brick))
          broaderQuantity.set(quantityName(q.subject.value), quantityName(q.object.value));
        break;
      case `${NS.owl}versionInfo`:
        if (q.subject.value.startsWith('https://brickschema.org/schema/')) version = q.object.value;
        break;
    }
  }

  const deprecated: Record<string, BrickDeprecation> = {};
  for (const c of [...deprecatedFlags].sort()) {
    deprecated[c] = { replaced_by: replacedBy.get(c) ?? null, since: deprecatedSince.get(c) ?? null };
  }

  const kinds = classifyKinds(parents);
  const classes: BrickClassIndexFile['classes'] = {};
  for (const c of [...classNames].sort()) {
    const own = kinds.get(c);
    classes[c] = {
      parents: [...new Set(parents.get(c))].sort(),
      ...(own && own.length > 0 ? { kinds: own } : {}),
    };
  }

  return {
    index: {
      source: BRICK_SOURCE_NOTICE,
      brick_version: version,
      layout:
        'classes maps each class CURIE to its direct parents (rdfs:subClassOf between named classes; the hierarchy is a DAG) and the branches (kinds) it sits under. Descendant sets are not stored: gateway/brick/class-index.ts inverts the parents at load time and memoises each closure. aliases maps brick:aliasOf (mirrored by owl:equivalentClass) to the preferred class; deprecated maps owl:deprecated classes to brick:isReplacedBy (null when the replacement is not a class).',
      prefixes: { ...INDEX_PREFIXES },
      roots: ROOTS,
      classes,
      aliases: sortKeys(aliases),
      deprecated,
    },
    quantities,
    broaderQuantity,
  };
}

function collectClasses(quads: Quad[], curie: (iri: string) => string | undefined): Set<string> {
  const names = new Set<string>();
  for (const q of quads) {
    if (q.predicate.value !== `${NS.rdf}type`) continue;
    if (q.object.value !== `${NS.owl}Class` && q.object.value !== `${NS.rdfs}Class`) continue;
    const c = q.subject.termType === 'NamedNode' ? curie(q.subject.value) : undefined;
    if (c) names.add(c);
  }
  return names;
}

/** Kinds by walking up the parents; a class may sit under more than one branch. */
function classifyKinds(parents: Map<string, string[]>): Map<string, BrickKind[]> {
  const rootKinds = new Map<string, BrickKind[]>();
  for (const [kind, roots] of Object.entries(ROOTS) as [BrickKind, string[]][]) {
    for (const root of roots) push(rootKinds, root, kind);
  }
  const result = new Map<string, BrickKind[]>();
  for (const c of parents.keys()) {
    const found = new Set<BrickKind>();
    const seen = new Set<string>();
    const queue = [c];
    for (let item = queue.pop(); item !== undefined; item = queue.pop()) {
      if (seen.has(item)) continue;
      seen.add(item);
      for (const kind of rootKinds.get(item) ?? []) found.add(kind);
      queue.push(...(parents.get(item) ?? []));
    }
    result.set(c, [...found].sort());
  }
  return result;
}

export function toCurie(iri: string, prefixes: Record<string, string>): string | undefined {
  for (const [prefix, namespace] of Object.entries(prefixes)) {
    if (iri.startsWith(namespace) && iri.length > namespace.length)
      return `${prefix}:${iri.slice(namespace.length)}`;
  }
  return undefined;
}

function quantityName(iri: string): string {
  return toCurie(iri, { qudtqk: NS.qudtqk, brick: NS.brick }) ?? iri;
}

function push<K, V>(map: Map<K, V[]>, key: K, value: V): void {
  const list = map.get(key);
  if (list) list.push(value);
  else map.set(key, [value]);
}

function sortKeys<T>(record: Record<string, T>): Record<string, T> {
  return Object.fromEntries(Object.entries(record).sort(([a], [b]) => a.localeCompare(b)));
}
