/**
 * The provider data plane: `{publicUrl}/dataplane/v1`, called by consumers' gateways with the
 * bearer token of a pull transfer (gateway/dataplane/access.ts).
 *
 *   POST /token                                    renew the token (answer: the new DataAddress)
 *   GET  /buildings/{building_id}/points           point list, filtered and narrowed here
 *   GET  /buildings/{building_id}/points/values    current values
 *   POST|PUT|PATCH|DELETE /buildings/{building_id}/...   writes the binding lets through
 *
 * Every request: this instance active (else 503 `standby`, gateway/dataplane/lease.ts) → token
 * (401) → agreement active and covering the building and the action (403) → the source binding
 * of the building (local id, key, methods, paths) → the backend. Answers are checked against
 * the spec's schemas before they leave. For signed-request agreements the request and the
 * answer are recorded as evidence and the answer is signed (gateway/signatures.ts); each
 * request is logged as the request-log setting says (gateway/dataplane/request-log.ts).
 */
import { createHash } from 'node:crypto';
import { Readable } from 'node:stream';
import Router from '@koa/router';
import type { Context, Next } from 'koa';
import type { Services } from '../../api/services.js';
import { evidenceStore } from '../../db/evidence.js';
import { DEFAULT_REQUEST_LOG } from '../../db/dataplane.js';
import { formatDuration } from '../../domain/duration.js';
import { jsonBodies } from '../../api/middleware/json-body.js';
import { requestSegments } from '../../domain/path-patterns.js';
import { loadBrickClassIndex, type BrickClassIndex } from '../brick/class-index.js';
import { GatewayError, buildingErrors, renderBuildingError, upstreamUnavailable } from '../errors.js';
import { NONCE_HEADER, SIGNATURE_HEADER } from '../signatures.js';
import { requestLogging } from './request-log.js';
import type { DataPlaneRuntime } from './runtime.js';
import { checkTransferToken, renewTransferAccess, type TransferGrant } from './access.js';
import {
  coverageAt,
  isKnownObject,
  loadCoverageFacts,
  type BuildingBinding,
  type Coverage,
} from './coverage.js';
import { accessCachesOf } from '../access-cache.js';
import {
  backendIncludes,
  parsePointsQuery,
  parseValuesQuery,
  selectPoints,
  type Include,
} from './filters.js';
import { bindingKey, cachedPointIndex } from './point-index.js';
import { pointsAnswerParts, readCheckedPoints, type CheckedPoints } from './checked-points.js';
import {
  ShapeError,
  fitsValueType,
  readEnvelope,
  readPointsAnswer,
  readValuesAnswer,
  type Point,
  type PointsAnswer,
  type Reading,
  type Unavailable,
} from '../schemas.js';
import { backendRefusal, callBackend } from './upstream.js';

export const DATAPLANE_BASE_PATH = '/dataplane/v1';

let brickIndex: BrickClassIndex | undefined;
const brick = (): BrickClassIndex => (brickIndex ??= loadBrickClassIndex());

interface DataplaneState {
  grant?: TransferGrant;
  coverage?: Coverage;
  buildingId?: string;
  target?: BuildingBinding;
  /** Set when the answer must be signed and recorded (a signed-request agreement). */
  signing?: Signing;
  error?: GatewayError;
}

interface Signing {
  /** Whether request and answer go into the evidence chain (false: an ended agreement's refusal, signed only). */
  record: boolean;
  agreementId: string;
  transferId: string;
  nonce: string;
  method: string;
  target: string;
  requestBodySha256?: string;
}

const NONCE_PATTERN = /^[\w-]{16,128}$/;
const sha256 = (bytes: Uint8Array | string) => createHash('sha256').update(bytes).digest('base64url');

const evidenceUnavailable = (what: string, cause: unknown) =>
  new GatewayError(
    'evidence_unavailable',
    `the ${what} could not be recorded as evidence, which this agreement requires; try again`,
    { cause },
  );

const stateOf = (ctx: Context) => ctx.state as DataplaneState;

function bearer(ctx: Context): string | undefined {
  const m = /^Bearer\s+(\S+)\s*$/i.exec(ctx.get('authorization'));
  return m?.[1];
}

const tokenRequired = () =>
  new GatewayError('unauthenticated', 'a transfer access token is required (Authorization: Bearer <token>)');
const tokenInvalid = () =>
  new GatewayError('unauthenticated', 'the access token is not valid (unknown, expired or revoked)');

/** Why a backend answer cannot be passed on: it breaks the spec's schema. */
function brokenAnswer(err: ShapeError): GatewayError {
  return upstreamUnavailable(
    "the holder's backend answered something that breaks the platform schema",
    false,
    {
      status: 502,
      details: [{ code: 'invalid_response', message: err.message, target: err.path }],
    },
  );
}

function parseJson(body: Buffer): unknown {
  try {
    return JSON.parse(body.toString('utf8'));
  } catch {
    throw upstreamUnavailable("the holder's backend did not answer JSON", false, { status: 502 });
  }
}

function checked<T>(read: () => T): T {
  try {
    return read();
  } catch (err) {
    if (err instanceof ShapeError) throw brokenAnswer(err);
    throw err;
  }
}

export function dataPlaneRouter(services: Services, runtime?: DataPlaneRuntime): Router {
  const { db, logger } = services;
  const evidence = evidenceStore(db);
  const caches = accessCachesOf(db);
  const router = new Router({ prefix: DATAPLANE_BASE_PATH });
  // Outermost first: the log sees the final answer, the signature covers the rendered error too.
  router.use(
    requestLogging(
      logger,
      () => runtime?.requestLog() ?? DEFAULT_REQUEST_LOG,
      (ctx) => {
        const state = stateOf(ctx);
        return {
          ...(state.grant
            ? { transferId: state.grant.transferId, consumerDid: state.grant.consumerDid }
            : {}),
          ...(state.buildingId ? { buildingId: state.buildingId } : {}),
          ...(state.error ? { errorCode: state.error.code } : {}),
        };
      },
    ),
  );
  router.use(signedAnswers);
  router.use(buildingErrors(logger, 'dataplane'));
  router.use(standbyUnlessActive);

  /** Only the lease holder serves; the others send callers on (spec: `standby`, retryable). */
  async function standbyUnlessActive(ctx: Context, next: Next) {
    if (runtime && !runtime.isActive()) {
      const addressed = /^\/buildings\/([^/]+)\//.exec(ctx.path.slice(DATAPLANE_BASE_PATH.length));
      if (addressed) stateOf(ctx).buildingId = safeDecode(addressed[1]!);
      throw new GatewayError('standby', 'another instance of this data plane is active', {
        retryAfter: formatDuration(runtime.standbyRetryAfterMs()),
      });
    }
    await next();
  }

  /**
   * For a signed-request agreement: the answer (whatever it is) is signed and recorded before it
   * leaves; when it cannot be recorded it is withheld and `evidence_unavailable` (signed) goes
   * out instead.
   */
  async function signedAnswers(ctx: Context, next: Next) {
    await next();
    const state = stateOf(ctx);
    const signing = state.signing;
    if (!signing) return;
    if (!runtime) {
      logger.error('data plane: a signed answer is required but this instance has no signer');
      renderBuildingError(ctx, new GatewayError('internal', 'the answer cannot be signed here'), 'dataplane');
      delete state.signing;
      return;
    }
    const answered = (status: number) => ({
      agreementId: signing.agreementId,
      nonce: signing.nonce,
      method: signing.method,
      target: signing.target,
      status,
    });
    let body = answerBytes(ctx);
    let signature = await runtime.signAnswer(body, answered(ctx.status));
    if (signing.record) {
      try {
        await evidence.append({
          kind: 'dataplane.answer',
          process_id: signing.transferId,
          payload: {
            agreement_id: signing.agreementId,
            request_id: String(ctx.state.requestId),
            nonce: signing.nonce,
            ...(signing.requestBodySha256 ? { request_body_sha256: signing.requestBodySha256 } : {}),
            status: ctx.status,
            body_sha256: sha256(body),
            signature,
          },
        });
      } catch (err) {
        logger.error(
          { err, transfer: signing.transferId },
          'data plane: cannot record an answer as evidence',
        );
        renderBuildingError(ctx, evidenceUnavailable('answer', err), 'dataplane');
        body = answerBytes(ctx);
        signature = await runtime.signAnswer(body, answered(ctx.status));
      }
    }
    ctx.set(SIGNATURE_HEADER, signature);
    if (body.length > 0) {
      ctx.type = 'application/json';
      ctx.body = body;
    }
  }

  /** Token → grant; the agreement must still be active. */
  async function authenticateTransfer(ctx: Context, next: Next) {
    const token = bearer(ctx);
    if (!token) {
      ctx.set('WWW-Authenticate', 'Bearer');
      throw tokenRequired();
    }
    // Both cached for a second at most; revocations drop them at once (gateway/access-cache.ts).
    const grant = await checkTransferToken(db, token);
    if (!grant) {
      ctx.set('WWW-Authenticate', 'Bearer error="invalid_token"');
      throw tokenInvalid();
    }
    const coverage = coverageAt(
      await caches.coverage.get(grant.agreementId, () => loadCoverageFacts(db, grant.agreementId)),
    );
    if ('refused' in coverage) {
      // The agreement's policy is not read any more: sign the refusal in case it asked for that.
      stateOf(ctx).signing = {
        record: false,
        agreementId: grant.agreementId,
        transferId: grant.transferId,
        nonce: NONCE_PATTERN.test(ctx.get(NONCE_HEADER)) ? ctx.get(NONCE_HEADER) : '',
        method: ctx.method,
        target: ctx.url.slice(DATAPLANE_BASE_PATH.length + 1),
      };
      throw new GatewayError(
        'forbidden',
        coverage.refused === 'ended'
          ? 'the agreement of this transfer has ended'
          : "the agreement's dataset is not offered here any more",
      );
    }
    Object.assign(stateOf(ctx), { grant, coverage });
    if (coverage.signedRequests) await recordRequest(ctx, grant);
    await next();
  }

  /** A signed-request agreement: the request is recorded before anything is done for it. */
  async function recordRequest(ctx: Context, grant: TransferGrant) {
    const given = ctx.get(NONCE_HEADER);
    const signing: Signing = {
      record: true,
      agreementId: grant.agreementId,
      transferId: grant.transferId,
      nonce: NONCE_PATTERN.test(given) ? given : '',
      method: ctx.method,
      target: ctx.url.slice(DATAPLANE_BASE_PATH.length + 1),
    };
    stateOf(ctx).signing = signing;
    try {
      await evidence.append({
        kind: 'dataplane.request',
        process_id: grant.transferId,
        payload: {
          agreement_id: grant.agreementId,
          consumer_did: grant.consumerDid,
          request_id: String(ctx.state.requestId),
          nonce: signing.nonce,
          method: signing.method,
          target: signing.target,
        },
      });
    } catch (err) {
      logger.error({ err, transfer: grant.transferId }, 'data plane: cannot record a request as evidence');
      throw evidenceUnavailable('request', err);
    }
  }

  /** The building must be covered by the agreement and served by a binding here. */
  function coveredBuilding(action: 'read' | 'write') {
    return async function requireCoveredBuilding(ctx: Context, next: Next) {
      const state = stateOf(ctx);
      const buildingId = (ctx.params as { building_id: string }).building_id;
      state.buildingId = buildingId;
      const coverage = state.coverage!;
      if (!coverage.objects.has(buildingId)) {
        if (!(await isKnownObject(db, buildingId)))
          throw new GatewayError('building_not_found', `no building '${buildingId}' here`);
        throw new GatewayError('forbidden', `the agreement does not cover building '${buildingId}'`);
      }
      if (!coverage[action])
        throw new GatewayError(
          'forbidden',
          `the agreement does not permit ${action === 'read' ? 'reading' : 'writing'}`,
        );
      const target = coverage.bindingFor(buildingId);
      if (!target)
        throw upstreamUnavailable(`no backend binding serves building '${buildingId}' here`, false);
      state.target = target;
      await next();
    };
  }

  const buildingPath = (target: BuildingBinding, rest: string) =>
    `v1/buildings/${encodeURIComponent(target.link.local_id)}/${rest}`;

  async function fetchPoints(
    ctx: Context,
    target: BuildingBinding,
    include: Set<Include>,
  ): Promise<CheckedPoints> {
    const query = new URLSearchParams();
    if (include.size) query.set('include', [...include].join(','));
    const answer = await callBackend({
      target,
      method: 'GET',
      path: buildingPath(target, 'points'),
      query,
      caller: ctx.res,
      requestId: ctx.state.requestId as string,
    });
    if (answer.status !== 200) throw backendRefusal(answer);
    return checked(() =>
      readCheckedPoints(
        answer.body,
        () => `${bindingKey(target)}\n${query.toString()}`,
        parseJson,
        readPointsAnswer,
      ),
    );
  }

  router.post('/token', async function renewToken(ctx) {
    const token = bearer(ctx);
    if (!token) {
      ctx.set('WWW-Authenticate', 'Bearer');
      throw tokenRequired();
    }
    const renewed = await renewTransferAccess(db, token);
    if (!renewed) {
      ctx.set('WWW-Authenticate', 'Bearer error="invalid_token"');
      throw tokenInvalid();
    }
    ctx.set('Cache-Control', 'no-store');
    ctx.body = renewed.address;
  });

  router.get(
    '/buildings/:building_id/points',
    authenticateTransfer,
    coveredBuilding('read'),
    async function points(ctx) {
      const { coverage, target, buildingId } = stateOf(ctx) as Required<DataplaneState>;
      const q = parsePointsQuery(ctx.query, brick());
      const read = await fetchPoints(ctx, target, backendIncludes(q));
      const answer = read.answer;
      const covered = coverage.points
        ? answer.points.filter((p) => coverage.points!.has(p.point_id))
        : answer.points;
      const selected = selectPoints(covered, q, {
        brick: brick(),
        ...(answer.equipment ? { equipment: answer.equipment } : {}),
        ...(answer.locations ? { locations: answer.locations } : {}),
      });
      // As bytes at once: the parsed backend answer (megabytes of objects for a big building)
      // is garbage from here on rather than once Koa has written it.
      const parts = pointsAnswerParts(
        {
          platform_version: answer.platform_version,
          building_id: buildingId,
          generated_at: answer.generated_at,
        },
        selected,
        coveredIncludes(answer, q.include, coverage.points ? covered : null),
        read,
      );
      ctx.type = 'application/json';
      if (parts.length === 1 || stateOf(ctx).signing) ctx.body = Buffer.concat(parts);
      else {
        // The remembered points go out as they are; a signature needs the bytes in one piece.
        ctx.body = Readable.from(parts, { objectMode: false });
        ctx.length = parts.reduce((n, part) => n + part.length, 0);
      }
    },
  );

  router.get(
    '/buildings/:building_id/points/values',
    authenticateTransfer,
    coveredBuilding('read'),
    async function values(ctx) {
      const { coverage, target, buildingId } = stateOf(ctx) as Required<DataplaneState>;
      const q = parseValuesQuery(ctx.query);
      const index = await cachedPointIndex(
        target,
        async () => (await fetchPoints(ctx, target, new Set())).answer.points,
      );
      const covers = (id: string) => coverage.points === null || coverage.points.has(id);

      // The requested points: the listed ones, or every covered point of the building.
      const requested = q.pointIds ?? [...index.keys()].filter(covers);
      const asked = requested.filter(covers);
      const outcome = new Map<string, Reading | Unavailable>();
      let platformVersion = '1.0';
      if (asked.length > 0) {
        // Short lists go to the backend; long ones would overflow a URL, so ask for all and pick.
        const query = new URLSearchParams();
        const list = asked.join(',');
        if (q.pointIds && list.length <= 4_000) query.set('point_ids', list);
        const answer = await callBackend({
          target,
          method: 'GET',
          path: buildingPath(target, 'points/values'),
          query,
          caller: ctx.res,
          requestId: ctx.state.requestId as string,
        });
        if (answer.status !== 200) throw backendRefusal(answer);
        const read = checked(() => readValuesAnswer(parseJson(answer.body)));
        platformVersion = read.platform_version;
        const now = Date.now();
        for (const r of read.readings) {
          if (outcome.has(r.point_id)) continue;
          const point = index.get(r.point_id);
          if (point && !fitsValueType(point.value_type, r.value)) {
            logger.warn(
              { point: r.point_id, building: buildingId },
              'backend reading does not match value_type',
            );
            outcome.set(r.point_id, { point_id: r.point_id, reason: 'no_data' });
          } else if (q.maxAgeMs !== undefined && now - Date.parse(r.timestamp) > q.maxAgeMs) {
            outcome.set(r.point_id, { point_id: r.point_id, reason: 'too_stale' });
          } else outcome.set(r.point_id, r);
        }
        for (const u of read.unavailable) if (!outcome.has(u.point_id)) outcome.set(u.point_id, u);
        for (const b of read.broken) {
          logger.warn({ building: buildingId, problem: b.problem }, 'backend value entry breaks the schema');
          if (b.point_id && !outcome.has(b.point_id))
            outcome.set(b.point_id, { point_id: b.point_id, reason: 'no_data' });
        }
      }
      // Every requested point in exactly one of readings or unavailable.
      const readings: Reading[] = [];
      const unavailable: Unavailable[] = [];
      for (const id of requested) {
        const o: Reading | Unavailable = !covers(id)
          ? { point_id: id, reason: 'forbidden' }
          : (outcome.get(id) ?? { point_id: id, reason: index.has(id) ? 'no_data' : 'not_found' });
        if ('reason' in o) unavailable.push(o);
        else readings.push(o);
      }
      ctx.body = { platform_version: platformVersion, building_id: buildingId, readings, unavailable };
    },
  );

  router.get('/buildings/:building_id/{*rest}', function unknownRead(ctx) {
    stateOf(ctx).buildingId = (ctx.params as { building_id: string }).building_id;
    throw new GatewayError('not_found', `no route ${ctx.method} ${ctx.path}`);
  });

  router.register(
    '/buildings/:building_id/{*rest}',
    ['POST', 'PUT', 'PATCH', 'DELETE'],
    [authenticateTransfer, coveredBuilding('write'), requireJsonBody, jsonBodies(), write],
  );

  /** A write's body, when it has one, is JSON: anything else would reach the backend as nothing. */
  async function requireJsonBody(ctx: Context, next: Next) {
    const hasBody = Number(ctx.get('content-length') || 0) > 0 || ctx.get('transfer-encoding') !== '';
    if (hasBody && !ctx.is('application/json', '+json'))
      throw new GatewayError(
        'invalid_request',
        'the request body must be JSON (Content-Type: application/json)',
        {
          status: 415,
        },
      );
    await next();
  }

  /** Forwards a write the agreement and the binding allow; the backend's refusal is passed on. */
  async function write(ctx: Context) {
    const { coverage, target, buildingId } = stateOf(ctx) as Required<DataplaneState>;
    const prefix = `${DATAPLANE_BASE_PATH}/buildings/`;
    const afterBuilding = ctx.path.slice(prefix.length).split('/').slice(1).join('/');
    if (requestSegments(afterBuilding) === null || afterBuilding === '')
      throw new GatewayError(
        'invalid_request',
        "the path may not hold empty, '.' or '..' segments or encoded slashes",
        {
          target: 'path',
        },
      );
    const body = (ctx.request as { body?: unknown }).body;
    if (coverage.points) checkWrittenPoints(body, coverage.points);
    const sent =
      body !== undefined && Object.keys(body as object).length > 0
        ? Buffer.from(JSON.stringify(body))
        : undefined;
    const signing = stateOf(ctx).signing;
    if (signing && sent) signing.requestBodySha256 = sha256(sent);
    const answer = await callBackend({
      target,
      method: ctx.method,
      path: buildingPath(target, afterBuilding),
      query: new URLSearchParams(ctx.querystring),
      ...(sent ? { body: sent } : {}),
      caller: ctx.res,
      requestId: ctx.state.requestId as string,
    });
    if (answer.status < 200 || answer.status > 299) throw backendRefusal(answer);
    ctx.status = answer.status;
    if (answer.body.length === 0) return;
    const envelope = checked(() => readEnvelope(parseJson(answer.body)));
    ctx.body = { ...envelope, building_id: buildingId };
  }

  router.all('/{*rest}', function unknownDataplaneRoute(ctx) {
    throw new GatewayError('not_found', `no route ${ctx.method} ${ctx.path}`);
  });
  return router;
}

function safeDecode(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    return segment;
  }
}

/** The answer's body as the bytes that will be sent (what the signature covers). */
function answerBytes(ctx: Context): Buffer {
  const body: unknown = ctx.body;
  if (body === undefined || body === null) return Buffer.alloc(0);
  if (Buffer.isBuffer(body)) return body;
  if (typeof body === 'string') return Buffer.from(body);
  return Buffer.from(JSON.stringify(body));
}

/**
 * When only some points are covered, a write must name its points so that we can check them:
 * the platform's setpoint body does (`{setpoints: [{point_id, value}]}`); anything else is refused.
 */
function checkWrittenPoints(body: unknown, covered: ReadonlySet<string>): void {
  const setpoints = (body as { setpoints?: unknown } | null)?.setpoints;
  if (!Array.isArray(setpoints))
    throw new GatewayError(
      'forbidden',
      'the agreement covers some points only; only setpoint writes naming them are let through',
    );
  setpoints.forEach((entry: unknown, i) => {
    const id = (entry as { point_id?: unknown } | null)?.point_id;
    if (typeof id !== 'string' || !covered.has(id))
      throw new GatewayError('forbidden', `the agreement does not cover point '${String(id)}'`, {
        target: `setpoints[${i}].point_id`,
      });
  });
}

/**
 * The includes the client asked for. With every point covered they pass as the backend sent
 * them; when the agreement covers some points only, only the equipment, groups and locations
 * those points refer to (locations with the ones enclosing them) are shown.
 */
function coveredIncludes(answer: PointsAnswer, include: Set<Include>, coveredPoints: Point[] | null) {
  const out: Partial<Pick<PointsAnswer, 'equipment' | 'groups' | 'locations'>> = {};
  const equipment = answer.equipment ?? [];
  const groups = answer.groups ?? [];
  const locations = answer.locations ?? [];
  if (coveredPoints === null) {
    if (include.has('equipment')) out.equipment = equipment;
    if (include.has('groups')) out.groups = groups;
    if (include.has('locations')) out.locations = locations;
    return out;
  }
  const equipmentIds = new Set(coveredPoints.flatMap((p) => (p.equipment_id ? [p.equipment_id] : [])));
  const shownEquipment = equipment.filter((e) => equipmentIds.has(e.equipment_id));
  if (include.has('equipment')) out.equipment = shownEquipment;
  if (include.has('groups')) {
    out.groups = groups
      .map((g) => ({ ...g, equipment_ids: g.equipment_ids.filter((id) => equipmentIds.has(id)) }))
      .filter((g) => g.equipment_ids.length > 0);
  }
  if (include.has('locations')) {
    const byId = new Map(locations.map((l) => [l.location_id, l]));
    const shown = new Set<string>();
    const climb = (id: string | undefined) => {
      for (let at = id; at !== undefined && !shown.has(at) && byId.has(at); at = byId.get(at)!.part_of)
        shown.add(at);
    };
    for (const p of coveredPoints) climb(p.location_id);
    for (const e of shownEquipment) climb(e.location_id);
    out.locations = locations.filter((l) => shown.has(l.location_id));
  }
  return out;
}
