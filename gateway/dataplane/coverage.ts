/**
 * What an agreement covers on the provider side: the objects (buildings) and points of its
 * dataset's product, minus the consumer's narrowing, and the actions of its contract policy;
 * and which backend binding serves each building.
 *
 * - Actions: `read` (or `use`) permits reading; writing needs an explicit `write` permission
 *   (steering a building is not implied by a general use permission). Prohibitions win.
 *   `odrl:dateTime` constraints are evaluated at every request (a time-limited agreement ends
 *   by itself); who-constraints (membership, role, participant, purpose) were settled when the
 *   agreement was made.
 * - `pl:signedRequests eq true` makes the agreement a signed-request agreement.
 */
import type { Knex } from 'knex';
import type { BackendBinding, LinkDetail, Protocol } from '../../domain/sources.js';
import { defaultLink, effectiveAllowedPaths } from '../../domain/sources.js';

export interface Coverage {
  agreementId: string;
  consumerDid: string;
  productId: string;
  /** Buildings (object ids) the agreement covers. */
  objects: ReadonlySet<string>;
  /** Points it covers; null = every point of the covered buildings. */
  points: ReadonlySet<string> | null;
  read: boolean;
  write: boolean;
  signedRequests: boolean;
  /** The source binding per covered building; absent when the product has none here. */
  bindingFor(objectId: string): BuildingBinding | undefined;
}

export interface BuildingBinding {
  binding: BackendBinding;
  link: LinkDetail;
  allowedPaths: string[];
}

interface OdrlConstraint {
  leftOperand?: unknown;
  operator?: unknown;
  rightOperand?: unknown;
}
interface OdrlRule {
  action?: unknown;
  constraint?: unknown;
}

const term = (v: unknown): string | undefined => {
  const raw = typeof v === 'string' ? v : (v as { '@id'?: unknown } | null)?.['@id'];
  if (typeof raw !== 'string') return undefined;
  return raw.replace(/^(odrl:|http:\/\/www\.w3\.org\/ns\/odrl\/2\/)/, '');
};

const asArray = (v: unknown): unknown[] => (Array.isArray(v) ? v : v === undefined || v === null ? [] : [v]);

function constraintsOf(rule: OdrlRule): OdrlConstraint[] {
  return asArray(rule.constraint).filter((c): c is OdrlConstraint => typeof c === 'object' && c !== null);
}

/** Whether a constraint holds now; only time is judged here (see the module comment). */
function holdsNow(c: OdrlConstraint, now: number): boolean {
  if (term(c.leftOperand) !== 'dateTime') return true;
  const right = c.rightOperand as { '@value'?: unknown } | string;
  const at = Date.parse(typeof right === 'string' ? right : String(right?.['@value']));
  if (Number.isNaN(at)) return false;
  switch (term(c.operator)) {
    case 'lt':
      return now < at;
    case 'lteq':
      return now <= at;
    case 'gt':
      return now > at;
    case 'gteq':
      return now >= at;
    default:
      return now === at;
  }
}

function dependsOnTime(agreement: Record<string, unknown>): boolean {
  const rules = [...asArray(agreement.permission), ...asArray(agreement.prohibition)] as OdrlRule[];
  return rules.some((r) => constraintsOf(r).some((c) => term(c.leftOperand) === 'dateTime'));
}

function signedRequestsRequired(rules: OdrlRule[]): boolean {
  return rules.some((r) =>
    constraintsOf(r).some((c) => {
      const left = typeof c.leftOperand === 'string' ? c.leftOperand : '';
      return /(^pl:|#)signedRequests$/.test(left) && (c.rightOperand === true || c.rightOperand === 'true');
    }),
  );
}

export function agreementActions(
  agreement: Record<string, unknown>,
  now = Date.now(),
): { read: boolean; write: boolean; signedRequests: boolean } {
  const permissions = asArray(agreement.permission) as OdrlRule[];
  const prohibitions = asArray(agreement.prohibition) as OdrlRule[];
  const applies = (r: OdrlRule) => constraintsOf(r).every((c) => holdsNow(c, now));
  const permitted = (action: string, implied: string[]) => {
    const covers = (r: OdrlRule) => {
      const a = term(r.action);
      return a === action || implied.includes(a ?? '');
    };
    if (prohibitions.some((r) => (covers(r) || term(r.action) === 'use') && applies(r))) return false;
    return permissions.some((r) => covers(r) && applies(r));
  };
  return {
    read: permitted('read', ['use']),
    write: permitted('write', []),
    signedRequests: signedRequestsRequired([...permissions, ...prohibitions]),
  };
}

interface CoverageRow {
  id: string;
  role: string;
  state: string;
  consumer_did: string;
  agreement: Record<string, unknown>;
  narrowing: { objects?: unknown; points?: unknown } | null;
  product_id: string | null;
  product_objects: string[] | null;
  product_points: string[] | null;
  product_backend: BackendBinding | null;
  source_protocol: Protocol | null;
  source_backend: BackendBinding | null;
  source_links: Record<string, LinkDetail> | null;
}

const stringList = (v: unknown): string[] | undefined =>
  Array.isArray(v) ? v.filter((x): x is string => typeof x === 'string') : undefined;

/** Why an agreement gives no access (any more). */
export interface CoverageRefusal {
  refused: 'unknown' | 'ended' | 'no_product';
}

/** What an active agreement covers apart from its time-dependent actions (cacheable). */
export interface CoverageFacts extends Omit<Coverage, 'read' | 'write' | 'signedRequests'> {
  /** The contract policy: the actions are judged from it at each request (dateTime constraints). */
  policy: Record<string, unknown>;
  /** The actions, when no constraint of the policy depends on the time (then judged once). */
  timeless?: Pick<Coverage, 'read' | 'write' | 'signedRequests'>;
}

/**
 * The coverage of an active provider agreement, or a reason why there is none. One query:
 * agreement, its product (the dataset id names the product, or an offer of it) and the source.
 */
export async function loadCoverage(
  db: Knex,
  agreementId: string,
  now = Date.now(),
): Promise<Coverage | CoverageRefusal> {
  return coverageAt(await loadCoverageFacts(db, agreementId), now);
}

/** The coverage at an instant: the facts with the actions the policy permits then. */
export function coverageAt(
  facts: CoverageFacts | CoverageRefusal,
  now = Date.now(),
): Coverage | CoverageRefusal {
  if ('refused' in facts) return facts;
  if (!facts.timeless) return { ...facts, ...agreementActions(facts.policy, now) };
  // The same for every request while the facts are cached: built once.
  let coverage = timelessCoverage.get(facts);
  if (!coverage) timelessCoverage.set(facts, (coverage = { ...facts, ...facts.timeless }));
  return coverage;
}
const timelessCoverage = new WeakMap<CoverageFacts, Coverage>();

/** Everything of the coverage that does not depend on the time of the request. */
export async function loadCoverageFacts(
  db: Knex,
  agreementId: string,
): Promise<CoverageFacts | CoverageRefusal> {
  const row = await db('agreements as a')
    .leftJoin('offers as o', 'o.id', 'a.dataset_id')
    .leftJoin('products as p', (j) => {
      j.on('p.id', '=', 'a.dataset_id').orOn('p.id', '=', 'o.asset_id');
    })
    .leftJoin('sources as s', 's.id', 'p.source_id')
    .where('a.id', agreementId)
    .first<CoverageRow | undefined>(
      'a.id',
      'a.role',
      'a.state',
      'a.consumer_did',
      'a.agreement',
      'a.narrowing',
      'p.id as product_id',
      'p.objects as product_objects',
      'p.points as product_points',
      'p.backend as product_backend',
      's.protocol as source_protocol',
      's.backend as source_backend',
      's.links as source_links',
    );
  if (!row || row.role !== 'provider') return { refused: 'unknown' };
  if (row.state !== 'active') return { refused: 'ended' };
  if (!row.product_id) return { refused: 'no_product' };

  const narrowedObjects = stringList(row.narrowing?.objects);
  const narrowedPoints = stringList(row.narrowing?.points);
  const objects = (row.product_objects ?? []).filter((o) => !narrowedObjects || narrowedObjects.includes(o));
  let points: Set<string> | null = row.product_points ? new Set(row.product_points) : null;
  if (narrowedPoints) points = new Set(narrowedPoints.filter((p) => points === null || points.has(p)));

  // The bindings are built once per building: the hot path asks for them on every request.
  const bindings = new Map<string, BuildingBinding | undefined>();
  const bindingOf = (objectId: string): BuildingBinding | undefined => {
    if (row.source_backend && row.source_links) {
      const source = {
        protocol: row.source_protocol ?? 'platform',
        backend: row.source_backend,
        links: row.source_links,
      };
      return {
        binding: row.source_backend,
        link: row.source_links[objectId] ?? defaultLink(objectId),
        allowedPaths: effectiveAllowedPaths(source),
      };
    }
    // An older product with its own binding: the object id is the backend's id.
    if (row.product_backend) {
      return {
        binding: row.product_backend,
        link: defaultLink(objectId),
        allowedPaths: row.product_backend.allowed_paths ?? [],
      };
    }
    return undefined;
  };
  return {
    agreementId: row.id,
    consumerDid: row.consumer_did,
    productId: row.product_id,
    objects: new Set(objects),
    points,
    policy: row.agreement,
    ...(dependsOnTime(row.agreement) ? {} : { timeless: agreementActions(row.agreement) }),
    bindingFor(objectId: string): BuildingBinding | undefined {
      if (!bindings.has(objectId)) bindings.set(objectId, bindingOf(objectId));
      return bindings.get(objectId);
    },
  };
}

/** Whether any of our sources or products serves this object (to tell building_not_found from forbidden). */
export async function isKnownObject(db: Knex, objectId: string): Promise<boolean> {
  const result = await db.raw<{ rows: Array<{ known: boolean }> }>(
    `SELECT EXISTS (SELECT 1 FROM sources WHERE objects \\? ?)
         OR EXISTS (SELECT 1 FROM products WHERE objects \\? ?) AS known`,
    [objectId, objectId],
  );
  return result.rows[0]?.known === true;
}
