/**
 * Brick class index: answers "class X and everything beneath it" for the gateway's `class`
 * filter (spec "Gateway", GET .../points) without parsing Brick's Turtle at run time.
 *
 * The JSON beside this file is produced by `npm run derive:brick` (dev/brick/derive.ts) from
 * one pinned Brick release. It stores only direct parents per class; descendant sets are
 * computed here on first use and memoised, because the full transitive lists would be several
 * times larger than the parent lists (the hierarchy is a DAG: some classes have several parents).
 * See ../shared/research/gateway.md §1.4 for why this shape was chosen.
 */
import { readFileSync } from 'node:fs';

/** Which top-level branch of Brick (or RealEstateCore) a class sits under. */
export type BrickKind = 'point' | 'equipment' | 'system' | 'loop' | 'collection' | 'location';

export interface BrickClassEntry {
  /** Direct rdfs:subClassOf parents that are themselves classes in the index. */
  parents: string[];
  /** Branches the class sits under (absent when none, e.g. for brick:Entity). */
  kinds?: BrickKind[];
}

export interface BrickDeprecation {
  /** Current class to use instead; null when Brick names no class (e.g. a quantity kind). */
  replaced_by: string | null;
  /** Brick version that deprecated it, when stated. */
  since: string | null;
}

export interface BrickClassIndexFile {
  source: string;
  brick_version: string;
  layout: string;
  prefixes: Record<string, string>;
  roots: Record<BrickKind, string[]>;
  classes: Record<string, BrickClassEntry>;
  /** brick:aliasOf (mirrored by owl:equivalentClass): alias → preferred class. */
  aliases: Record<string, string>;
  deprecated: Record<string, BrickDeprecation>;
}

export interface BrickClassIndex {
  readonly version: string;
  /** Whether the class (CURIE, or an IRI in a known namespace) exists in the pinned release. */
  isKnown(curieOrIri: string): boolean;
  /** The class to use today: aliases and deprecations followed to the end; undefined if unknown. */
  canonical(curieOrIri: string): string | undefined;
  /** One step of that: the class an alias or a deprecated class names directly; undefined if none. */
  successorOf(curieOrIri: string): string | undefined;
  /**
   * The class and every class beneath it (inclusive), including aliases and deprecated
   * classes that stand for a member, so that points typed with an old name still match.
   * Empty for an unknown class.
   */
  descendantsOf(curieOrIri: string): ReadonlySet<string>;
  /** The class and every class above it (inclusive), starting from both it and its canonical class. */
  ancestorsOf(curieOrIri: string): ReadonlySet<string>;
  /** Whether `curieOrIri` is `ancestor` or sits beneath it. */
  isA(curieOrIri: string, ancestor: string): boolean;
  kindsOf(curieOrIri: string): ReadonlySet<BrickKind>;
  /** Equipment, System or Loop: a class that selects "the points of that equipment" (spec "Gateway"). */
  isEquipmentOrSystem(curieOrIri: string): boolean;
  /** The CURIE for a class given as CURIE or as an IRI in one of the index's namespaces. */
  toCurie(curieOrIri: string): string | undefined;
}

const DEFAULT_INDEX_URL = new URL('./class-index.json', import.meta.url);

/** Reads the derived JSON synchronously (it is small) and builds the index. */
export function loadBrickClassIndex(file: string | URL = DEFAULT_INDEX_URL): BrickClassIndex {
  const data = JSON.parse(readFileSync(file, 'utf8')) as BrickClassIndexFile;
  return createBrickClassIndex(data);
}

export function createBrickClassIndex(data: BrickClassIndexFile): BrickClassIndex {
  const classes = new Map(Object.entries(data.classes));
  const children = invertParents(classes);
  const redirectsTo = collectRedirects(data);
  const prefixes = Object.entries(data.prefixes);
  const descendantsMemo = new Map<string, ReadonlySet<string>>();
  const ancestorsMemo = new Map<string, ReadonlySet<string>>();

  function toCurie(curieOrIri: string): string | undefined {
    for (const [prefix, namespace] of prefixes) {
      if (curieOrIri.startsWith(namespace)) return `${prefix}:${curieOrIri.slice(namespace.length)}`;
    }
    const colon = curieOrIri.indexOf(':');
    if (colon > 0 && Object.hasOwn(data.prefixes, curieOrIri.slice(0, colon))) return curieOrIri;
    return undefined;
  }

  function known(curieOrIri: string): string | undefined {
    const curie = toCurie(curieOrIri);
    return curie !== undefined && classes.has(curie) ? curie : undefined;
  }

  function successorOf(curieOrIri: string): string | undefined {
    const curie = known(curieOrIri);
    if (curie === undefined) return undefined;
    const next = data.aliases[curie] ?? data.deprecated[curie]?.replaced_by;
    return next && classes.has(next) ? next : undefined;
  }

  function canonical(curieOrIri: string): string | undefined {
    let current = known(curieOrIri);
    if (current === undefined) return undefined;
    // Chains exist (an alias of a class that was later deprecated); the guard stops a cycle.
    const seen = new Set<string>([current]);
    for (
      let next = successorOf(current);
      next !== undefined && !seen.has(next);
      next = successorOf(current)
    ) {
      seen.add(next);
      current = next;
    }
    return current;
  }

  function descendantsOf(curieOrIri: string): ReadonlySet<string> {
    const start = canonical(curieOrIri);
    if (start === undefined) return new Set();
    const memo = descendantsMemo.get(start);
    if (memo) return memo;
    const result = walk([start], (c) => [...(children.get(c) ?? []), ...(redirectsTo.get(c) ?? [])]);
    descendantsMemo.set(start, result);
    return result;
  }

  function ancestorsOf(curieOrIri: string): ReadonlySet<string> {
    const own = known(curieOrIri);
    if (own === undefined) return new Set();
    const memo = ancestorsMemo.get(own);
    if (memo) return memo;
    const starts = [own, canonical(own) ?? own];
    const result = walk(starts, (c) => classes.get(c)?.parents ?? []);
    ancestorsMemo.set(own, result);
    return result;
  }

  function kindsOf(curieOrIri: string): ReadonlySet<BrickKind> {
    const own = known(curieOrIri);
    if (own === undefined) return new Set();
    const current = canonical(own) ?? own;
    return new Set([...(classes.get(own)?.kinds ?? []), ...(classes.get(current)?.kinds ?? [])]);
  }

  return {
    version: data.brick_version,
    isKnown: (c) => known(c) !== undefined,
    canonical,
    successorOf,
    descendantsOf,
    ancestorsOf,
    isA: (c, ancestor) => {
      const target = canonical(ancestor);
      const ancestors = ancestorsOf(c);
      return ancestors.has(toCurie(ancestor) ?? ancestor) || (target !== undefined && ancestors.has(target));
    },
    kindsOf,
    isEquipmentOrSystem: (c) => {
      const kinds = kindsOf(c);
      return kinds.has('equipment') || kinds.has('system') || kinds.has('loop');
    },
    toCurie,
  };
}

function invertParents(classes: Map<string, BrickClassEntry>): Map<string, string[]> {
  const children = new Map<string, string[]>();
  for (const [curie, entry] of classes) {
    for (const parent of entry.parents) {
      const list = children.get(parent);
      if (list) list.push(curie);
      else children.set(parent, [curie]);
    }
  }
  return children;
}

/** For each class, the aliases and deprecated classes that point straight at it. */
function collectRedirects(data: BrickClassIndexFile): Map<string, string[]> {
  const redirects = new Map<string, string[]>();
  const add = (from: string, to: string): void => {
    const list = redirects.get(to);
    if (list) list.push(from);
    else redirects.set(to, [from]);
  };
  for (const [alias, target] of Object.entries(data.aliases)) add(alias, target);
  for (const [old, { replaced_by }] of Object.entries(data.deprecated))
    if (replaced_by) add(old, replaced_by);
  return redirects;
}

function walk(starts: string[], next: (curie: string) => readonly string[]): ReadonlySet<string> {
  const seen = new Set<string>();
  const queue = [...starts];
  for (let item = queue.pop(); item !== undefined; item = queue.pop()) {
    if (seen.has(item)) continue;
    seen.add(item);
    queue.push(...next(item));
  }
  return seen;
}
