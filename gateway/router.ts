/**
 * The consumer gateway: `/gateway/{alias}/v1/buildings/{building_id}/...` for applications
 * holding a gateway-scope API key. It finds the connection's running transfer and forwards the
 * request to the provider's data plane with the transfer's bearer token; the data plane
 * enforces the agreement.
 *
 * Every failure is an ErrorResponse (gateway/errors.ts). Our own refusals carry
 * `PL-Error-Origin: gateway`; refusals of the provider's data plane or of the holder's backend
 * are passed on in the same shape with their own origin, rebuilt field by field.
 *
 * When the connection's agreement requires signed requests (judged from our own copy of the
 * agreement), the request is recorded as evidence before it leaves, the answer's signature is
 * checked against the provider's DID document (gateway/signatures.ts) and the answer is
 * recorded before the application sees it.
 */
import { peerAddressProblem, peerDispatcher } from '../auth/peer-addresses.js';
import { createHash, randomBytes } from 'node:crypto';
import { Transform, type Readable } from 'node:stream';
import Router from '@koa/router';
import type { Context, Next } from 'koa';
import { request, errors as undiciErrors } from 'undici';
import type { Services } from '../api/services.js';
import { authenticate, type Caller } from '../api/middleware/authenticate.js';
import { jsonBodies } from '../api/middleware/json-body.js';
import { apiKeyStore } from '../db/api-keys.js';
import { findConnectionApp, findGatewayRoute, type GatewayRoute } from '../db/connections.js';
import { accessCachesOf, appKey } from './access-cache.js';
import { requestSegments } from '../domain/path-patterns.js';
import { consumerAgreementPolicy } from '../db/dataplane.js';
import { evidenceStore } from '../db/evidence.js';
import { endpointProperty } from './dataplane/access.js';
import { agreementActions } from './dataplane/coverage.js';
import type { DataPlaneRuntime } from './dataplane/runtime.js';
import {
  AnswerSignatureError,
  NONCE_HEADER,
  SIGNATURE_HEADER,
  verifyAnswer,
  type AnsweredRequest,
} from './signatures.js';
import { CallAbort, describeNetworkError, readCapped, MAX_ANSWER_BYTES } from './dataplane/upstream.js';
import {
  ERROR_ORIGINS,
  ERROR_ORIGIN_HEADER,
  GatewayError,
  buildingErrors,
  durationFromSeconds,
  readErrorResponse,
  upstreamUnavailable,
  type ErrorOrigin,
} from './errors.js';

export const GATEWAY_BASE_PATH = '/gateway';

/** Outermost budget: longer than the data plane's own (which is longer than the backend's). */
export const DATAPLANE_TIMEOUTS = { connect: 3_000, headers: 20_000, total: 25_000 };

const dispatcherOptions = {
  connect: { timeout: DATAPLANE_TIMEOUTS.connect },
  headersTimeout: DATAPLANE_TIMEOUTS.headers,
  bodyTimeout: DATAPLANE_TIMEOUTS.total,
  connections: 64,
  pipelining: 1,
  keepAliveTimeout: 4_000,
  maxResponseSize: MAX_ANSWER_BYTES,
};
// The data plane's endpoint comes from the provider: never into our own network
// (auth/peer-addresses.ts); loopback only with DID_WEB_ALLOW_HTTP.
const dispatchers = {
  publicOnly: peerDispatcher(false, dispatcherOptions),
  loopbackAllowed: peerDispatcher(true, dispatcherOptions),
};

/** The read routes of the platform protocol; anything else read is an unknown route. */
const READ_ROUTES = new Set(['points', 'points/values']);
const WRITE_METHODS = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

interface GatewayState {
  buildingId?: string;
  caller?: Caller;
}

interface Forwarded {
  status: number;
  /** The whole answer; empty when it is passed on as a stream. */
  body: Buffer;
  /** A success answer passed on as it arrives (its length declared, within the cap). */
  stream?: { body: Readable; length: number };
  origin: string | null;
  retryAfterSeconds: number | undefined;
  /** The PL-Evidence header, when the data plane signed its answer. */
  signature: string | undefined;
  /** What the answer's signature must be bound to (signed-request connections only). */
  request?: Omit<AnsweredRequest, 'agreementId' | 'status'>;
}

const EMPTY = Buffer.alloc(0);
/** Smaller answers are read whole: for them a stream costs more than the copy it saves. */
const STREAM_FROM_BYTES = 64 * 1024;

const sha256 = (bytes: Uint8Array) => createHash('sha256').update(bytes).digest('base64url');

/** Agreements never change: whether one requires signed requests is remembered (bounded). */
const MAX_REMEMBERED_AGREEMENTS = 10_000;

/**
 * One call to the data plane: aborted when the total budget runs out or our caller goes away,
 * with one timer and one signal per request (cheaper than AbortSignal.any/timeout, whose
 * timers outlive the request).
 */
class Call {
  private readonly timer: NodeJS.Timeout;
  readonly signal = new CallAbort();

  constructor(ctx: Context) {
    this.timer = setTimeout(
      () => this.abort(new DOMException('the data plane did not answer in time', 'TimeoutError')),
      DATAPLANE_TIMEOUTS.total,
    );
    ctx.res.once('close', () => {
      if (!ctx.res.writableFinished) this.abort();
    });
  }

  abort(reason?: unknown): void {
    this.done();
    this.signal.abort(reason);
  }

  done(): void {
    clearTimeout(this.timer);
  }
}

/**
 * Passes a success answer on as it arrives, counting its bytes: more than it declared cuts it
 * off (the application then sees a broken answer, never a longer one). The HTTP parser already
 * stops at the declared length; the count makes the cap hold whatever the transport does.
 */
function counted(body: Readable, declared: number, call: Call): Readable {
  let size = 0;
  const out = new Transform({
    transform(chunk: Buffer, _encoding, next) {
      size += chunk.length;
      if (size > declared)
        next(upstreamUnavailable("the provider's data plane answered more than it declared", false));
      else next(null, chunk);
    },
  });
  // Wired by hand rather than with stream.pipeline, which costs an AbortController (and the
  // DOMException of its abort) per answer: either side ending early tears down the other.
  body.on('error', (err) => out.destroy(err));
  out.once('close', () => {
    if (out.readableEnded) return call.done();
    call.abort();
    body.destroy();
  });
  return body.pipe(out);
}

export function gatewayRouter(services: Services, runtime?: DataPlaneRuntime): Router {
  const { db, logger } = services;
  const evidence = evidenceStore(db);
  const router = new Router({ prefix: GATEWAY_BASE_PATH });
  router.use(buildingErrors(logger, 'gateway'));
  const allowLoopback = services.connector.allowLoopbackPeers ?? false;
  const dispatcher = allowLoopback ? dispatchers.loopbackAllowed : dispatchers.publicOnly;
  const caches = accessCachesOf(db);
  /** The connection's route, cached (gateway/access-cache.ts) unless a fresh read is asked for. */
  const routeOf = (alias: string, fresh = false) => {
    if (!fresh) return caches.routes.get(alias, () => findGatewayRoute(db, alias));
    caches.routes.delete(alias);
    return findGatewayRoute(db, alias);
  };

  const signedAgreements = new Map<string, boolean>();
  async function requiresSignedAnswers(agreementId: string | null): Promise<boolean> {
    if (!agreementId) return false;
    const known = signedAgreements.get(agreementId);
    if (known !== undefined) return known;
    const policy = await consumerAgreementPolicy(db, agreementId);
    const signed = policy ? agreementActions(policy).signedRequests : false;
    if (signedAgreements.size >= MAX_REMEMBERED_AGREEMENTS) signedAgreements.clear();
    signedAgreements.set(agreementId, signed);
    return signed;
  }

  const evidenceUnavailable = (what: string, cause: unknown) =>
    new GatewayError(
      'evidence_unavailable',
      `the ${what} could not be recorded as evidence, which this connection's agreement requires; try again`,
      { cause },
    );

  const BUILDING_ROUTE = '/:alias/v1/buildings/:building_id/{*rest}';

  /** Who asks, on which connection, and whether the application may do it. */
  async function authorizeApp(ctx: Context, next: Next) {
    const { alias } = ctx.params as { alias: string };
    const caller = (ctx.state as GatewayState).caller;
    if (!caller)
      throw new GatewayError(
        'unauthenticated',
        'a gateway API key is required (Authorization: Bearer <key>)',
      );
    // An unknown alias and a connection this application may not use look the same.
    const app = await caches.apps.get(appKey(alias, caller.id), () =>
      findConnectionApp(db, alias, caller.id),
    );
    if (!app) throw new GatewayError('forbidden', `this application may not use connection '${alias}'`);
    if (WRITE_METHODS.has(ctx.method) && app.access !== 'read_write')
      throw new GatewayError('forbidden', `this application may only read through connection '${alias}'`);
    await next();
  }

  function addressedBuilding(ctx: Context, next: Next) {
    (ctx.state as GatewayState).buildingId = (ctx.params as { building_id: string }).building_id;
    return next();
  }

  /** The connection's transfer must be running, with a token that has not run out. */
  function activeAddress(route: GatewayRoute | null, alias: string) {
    const address = route?.dataAddress;
    if (!route || route.transferState !== 'STARTED' || !address) {
      const why = !route?.transferId
        ? 'it has no transfer yet'
        : `its transfer is ${route.transferState ?? 'unknown'}`;
      throw upstreamUnavailable(`connection '${alias}' is not active (${why})`, true);
    }
    let read = addresses.get(address);
    if (!read) {
      read = {
        endpoint: address.endpoint.replace(/\/+$/, ''),
        token: endpointProperty(address, 'authorization'),
        expiresAt: Date.parse(endpointProperty(address, 'expiresAt') ?? ''),
      };
      addresses.set(address, read);
    }
    if (!read.token || !(read.expiresAt > Date.now()))
      throw upstreamUnavailable(
        `the access token of connection '${alias}' expired and renewing it failed`,
        true,
      );
    return { endpoint: read.endpoint, token: read.token };
  }
  /** A cached route's data address, read once (routes live in the access cache a second at most). */
  const addresses = new WeakMap<
    GatewayRoute['dataAddress'] & object,
    { endpoint: string; token: string | undefined; expiresAt: number }
  >();

  /** peerAddressProblem is a pure function of the address: judged once per data plane endpoint. */
  const endpointProblems = new Map<string, string | null>();
  function endpointProblem(endpoint: string): string | null {
    let problem = endpointProblems.get(endpoint);
    if (problem === undefined) {
      problem = peerAddressProblem(endpoint, allowLoopback);
      if (endpointProblems.size >= 1_000) endpointProblems.clear();
      endpointProblems.set(endpoint, problem);
    }
    return problem;
  }

  /**
   * Sends the request to the provider's data plane. A success answer of declared length is
   * passed on as a stream (`stream: true`); everything else is read whole, up to the cap:
   * refusals are rebuilt from their body, and a signed answer is checked over all its bytes
   * before anything of it reaches the application.
   */
  async function forward(
    ctx: Context,
    target: { endpoint: string; token: string },
    path: string,
    body: Buffer | undefined,
    options: { signed: boolean; stream: boolean },
  ): Promise<Forwarded> {
    const problem = endpointProblem(target.endpoint);
    if (problem)
      throw upstreamUnavailable(`the provider's data plane address cannot be used: ${problem}`, false);
    const url = `${target.endpoint}/${path}${ctx.querystring ? `?${ctx.querystring}` : ''}`;
    let bound: Forwarded['request'];
    if (options.signed) {
      // The target as it goes on the wire (undici sends the parsed URL's path and query).
      const sent = new URL(url);
      bound = {
        nonce: randomBytes(16).toString('base64url'),
        method: ctx.method,
        target: `${sent.pathname.slice(new URL(target.endpoint).pathname.replace(/\/+$/, '').length + 1)}${sent.search}`,
      };
    }
    const call = new Call(ctx);
    let streaming = false;
    try {
      const res = await request(url, {
        method: ctx.method as 'GET',
        headers: {
          authorization: `Bearer ${target.token}`,
          accept: 'application/json',
          'accept-encoding': 'identity',
          'x-request-id': String(ctx.state.requestId),
          ...(bound ? { [NONCE_HEADER.toLowerCase()]: bound.nonce } : {}),
          ...(body ? { 'content-type': 'application/json' } : {}),
        },
        ...(body ? { body } : {}),
        dispatcher,
        signal: call.signal,
      });
      const declared = res.headers['content-length'];
      const length = typeof declared === 'string' && declared !== '' ? Number(declared) : NaN;
      if (length > MAX_ANSWER_BYTES) {
        call.abort();
        res.body.destroy();
        throw upstreamUnavailable("the provider's data plane answered more than 16 MiB", false);
      }
      const origin = res.headers[ERROR_ORIGIN_HEADER.toLowerCase()];
      const retryAfter = Number(res.headers['retry-after']);
      const signature = res.headers[SIGNATURE_HEADER.toLowerCase()];
      const answer: Omit<Forwarded, 'body'> = {
        status: res.statusCode,
        origin: typeof origin === 'string' ? origin : null,
        retryAfterSeconds: Number.isFinite(retryAfter) ? retryAfter : undefined,
        signature: typeof signature === 'string' ? signature : undefined,
        ...(bound ? { request: bound } : {}),
      };
      if (
        options.stream &&
        res.statusCode >= 200 &&
        res.statusCode <= 299 &&
        Number.isSafeInteger(length) &&
        length > STREAM_FROM_BYTES
      ) {
        streaming = true;
        return { ...answer, body: EMPTY, stream: { body: counted(res.body, length, call), length } };
      }
      const bytes = await readCapped(res.body, () => call.abort(), "the provider's data plane");
      return { ...answer, body: bytes };
    } catch (err) {
      if (err instanceof GatewayError) throw err;
      // undici's own cap (dispatcher maxResponseSize) may fire before ours: the same refusal.
      const tooLarge = err instanceof undiciErrors.ResponseExceededMaxSizeError;
      throw upstreamUnavailable(`the provider's data plane ${describeNetworkError(err)}`, !tooLarge, {
        cause: err,
      });
    } finally {
      if (!streaming) call.done();
    }
  }

  function errorCodeOf(answer: Forwarded): string | undefined {
    try {
      return readErrorResponse(JSON.parse(answer.body.toString('utf8')))?.error.code;
    } catch {
      return undefined;
    }
  }

  /** A refusal of the data plane (or, through it, of the backend) in the same shape, rebuilt. */
  function passedOn(answer: Forwarded): GatewayError {
    let parsed: unknown;
    try {
      parsed = JSON.parse(answer.body.toString('utf8'));
    } catch {
      parsed = undefined;
    }
    const read = readErrorResponse(parsed);
    const serverSide = answer.status >= 500;
    if (!read)
      return upstreamUnavailable(
        `the provider's data plane answered ${answer.status} without an error body`,
        serverSide,
      );
    const origin: ErrorOrigin = (ERROR_ORIGINS as readonly string[]).includes(answer.origin ?? '')
      ? (answer.origin as ErrorOrigin)
      : 'dataplane';
    const { error } = read;
    const retryAfter =
      error.retry_after ??
      (answer.retryAfterSeconds !== undefined ? durationFromSeconds(answer.retryAfterSeconds) : undefined);
    return new GatewayError(error.code, error.message, {
      status: answer.status >= 400 && answer.status <= 599 ? answer.status : 502,
      retryable: error.retryable ?? serverSide,
      ...(error.target ? { target: error.target } : {}),
      ...(retryAfter ? { retryAfter } : {}),
      ...(error.details ? { details: error.details } : {}),
      // The gateway itself never answers as `dataplane` or `backend`.
      origin: origin === 'gateway' ? 'dataplane' : origin,
    });
  }

  router.register(
    BUILDING_ROUTE,
    ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'],
    [
      addressedBuilding,
      authenticate(apiKeyStore(db), 'gateway'),
      authorizeApp,
      requireJsonBody,
      jsonBodies(),
      relay,
    ],
  );

  /** A write's body, when it has one, must be JSON. */
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

  async function relay(ctx: Context) {
    const { alias, building_id: buildingId } = ctx.params as { alias: string; building_id: string };
    // The path below the building, as sent (not decoded), checked strictly.
    const marker = `/v1/buildings/`;
    const rest = ctx.path
      .slice(ctx.path.indexOf(marker) + marker.length)
      .split('/')
      .slice(1)
      .join('/');
    if (rest === '' || requestSegments(rest) === null)
      throw new GatewayError('not_found', `no route ${ctx.method} ${ctx.path}`);
    if (ctx.method === 'GET' && !READ_ROUTES.has(rest))
      throw new GatewayError('not_found', `no route ${ctx.method} ${ctx.path}`);

    const parsed = (ctx.request as { body?: unknown }).body;
    const body =
      WRITE_METHODS.has(ctx.method) && parsed !== undefined && Object.keys(parsed as object).length > 0
        ? Buffer.from(JSON.stringify(parsed))
        : undefined;
    const path = `buildings/${encodeURIComponent(buildingId)}/${rest}`;

    let route = await routeOf(alias);
    let target = activeAddress(route, alias);
    const signed = await requiresSignedAnswers(route!.agreementId);
    const processId = route!.transferId ?? route!.agreementId!;
    if (signed) {
      try {
        await evidence.append({
          kind: 'gateway.request',
          process_id: processId,
          payload: {
            alias,
            agreement_id: route!.agreementId,
            application: (ctx.state as GatewayState).caller?.id ?? null,
            request_id: String(ctx.state.requestId),
            method: ctx.method,
            path: `${path}${ctx.querystring ? `?${ctx.querystring}` : ''}`,
            ...(body ? { body_sha256: sha256(body) } : {}),
          },
        });
      } catch (err) {
        logger.error({ err, alias }, 'gateway: cannot record a request as evidence');
        throw evidenceUnavailable('request', err);
      }
    }
    const options = { signed, stream: !signed };
    let answer = await forward(ctx, target, path, body, options);
    if (answer.status === 401 && ctx.method === 'GET') {
      // The connection's token may have been renewed while this request was on its way.
      route = await routeOf(alias, true);
      const again = activeAddress(route, alias);
      if (again.token !== target.token) {
        target = again;
        answer = await forward(ctx, target, path, body, options);
      }
    }
    if (signed) await checkSignedAnswer(ctx, answer, route!, processId);
    if (answer.status < 200 || answer.status > 299) throw passedOn(answer);
    ctx.status = answer.status;
    if (answer.stream) {
      ctx.body = answer.stream.body;
      ctx.type = 'application/json';
      ctx.length = answer.stream.length;
    } else if (answer.body.length > 0) {
      ctx.type = 'application/json';
      ctx.body = answer.body;
    }
  }

  /**
   * A signed-request connection: the answer must carry the provider's valid signature, bound
   * to this request, and is recorded before the application sees it. The two refusals a data
   * plane gives before it knows the agreement (401 for the token, 503 standby) carry no data
   * and cannot be signed; they pass unsigned.
   */
  async function checkSignedAnswer(ctx: Context, answer: Forwarded, route: GatewayRoute, processId: string) {
    if (answer.status === 401 || (answer.status === 503 && errorCodeOf(answer) === 'standby')) return;
    const request = { ...answer.request!, agreementId: route.agreementId!, status: answer.status };
    let verified: { kid: string; signature: string };
    try {
      if (!runtime) throw new AnswerSignatureError('this instance cannot check signatures');
      if (!route.providerDid) throw new AnswerSignatureError('the connection does not name its provider');
      verified = await verifyAnswer({
        header: answer.signature,
        body: answer.body,
        providerDid: route.providerDid,
        request,
        resolver: runtime.resolver,
      });
    } catch (err) {
      if (!(err instanceof AnswerSignatureError)) throw err;
      logger.warn({ alias: route.alias, reason: err.message }, 'gateway: answer refused, no valid signature');
      // Kept as evidence too when possible: a refused answer may matter in a dispute.
      await evidence
        .append({
          kind: 'gateway.answer_refused',
          process_id: processId,
          payload: {
            request_id: String(ctx.state.requestId),
            nonce: request.nonce,
            status: answer.status,
            body_sha256: sha256(answer.body),
            signature: answer.signature ?? null,
            reason: err.message,
          },
        })
        .catch(() => undefined);
      throw upstreamUnavailable(
        `the provider's data plane answer has no valid signature (${err.message})`,
        false,
        { status: 502 },
      );
    }
    try {
      await evidence.append({
        kind: 'gateway.answer',
        process_id: processId,
        payload: {
          request_id: String(ctx.state.requestId),
          nonce: request.nonce,
          status: answer.status,
          body_sha256: sha256(answer.body),
          kid: verified.kid,
          signature: verified.signature,
        },
      });
    } catch (err) {
      logger.error({ err, alias: route.alias }, 'gateway: cannot record an answer as evidence');
      throw evidenceUnavailable('answer', err);
    }
  }

  router.all('/{*rest}', function unknownGatewayRoute(ctx) {
    throw new GatewayError('not_found', `no route ${ctx.method} ${ctx.path}`);
  });
  return router;
}
