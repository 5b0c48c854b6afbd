/** The connector's HTTP surface: health probes, the management API under /api/v1, and (later) protocol and gateway routes. */
import Koa from 'koa';
import Router from '@koa/router';
import { jsonBodies } from './middleware/json-body.js';
import { randomUUID } from 'node:crypto';
import type { Services } from './services.js';
import { managementErrors } from './middleware/errors.js';
import { authenticate } from './middleware/authenticate.js';
import { mount, type RouteRegistry } from './routes.js';
import { buildOpenApi } from './openapi.js';
import { apiKeyStore } from '../db/api-keys.js';
import { sourceRoutes } from './management/sources.js';
import { productRoutes } from './management/products.js';
import { offerRoutes } from './management/offers.js';
import { policyRoutes } from './management/policies.js';
import { apiKeyRoutes } from './management/api-keys.js';
import { evidenceRoutes } from './management/evidence.js';
import { ApiError } from '../domain/errors.js';
import { protocolRouter, versionRouter } from './protocol/index.js';
import { requireConnector, type Peer } from './middleware/connector-auth.js';
import type { ConnectorTrust } from '../auth/identity.js';
import type { PolicyContext } from '../domain/policy-evaluation.js';
import { negotiationRoutes } from './management/negotiations.js';
import { outboxRoutes } from './management/outbox.js';
import { transferRoutes } from './management/transfers.js';
import { connectionRoutes } from './management/connections.js';
import { catalogRoutes } from './management/catalog.js';
import { dataPlaneRouter } from '../gateway/dataplane/router.js';
import { gatewayRouter } from '../gateway/router.js';
import { dropCoverageAfterWrites } from '../gateway/access-cache.js';
import { settingRoutes } from './management/settings.js';
import type { DataPlaneRuntime } from '../gateway/dataplane/runtime.js';

/** What the policies of an offer are evaluated against for an authenticated peer. */
function peerPolicyContext(ctx: Koa.Context): Promise<PolicyContext> {
  const peer = ctx.state.peer as Peer;
  return Promise.resolve({
    participantDid: peer.did,
    roles: peer.roles,
    membership: 'active',
    now: new Date(),
    purpose: null,
  });
}
import { didDocumentPath, type DidDocument } from '../auth/did.js';

export interface Readiness {
  ready(): Promise<{ ok: boolean; checks: Record<string, string> }>;
}

function requestIds() {
  return async function assignRequestId(ctx: Koa.Context, next: Koa.Next) {
    const given = ctx.get('x-request-id');
    ctx.state.requestId = /^[\w.-]{1,100}$/.test(given) ? given : randomUUID();
    ctx.set('x-request-id', ctx.state.requestId as string);
    await next();
  };
}

function accessLog(services: Services) {
  return async function logRequest(ctx: Koa.Context, next: Koa.Next) {
    const started = performance.now();
    // The data plane logs its own requests as its request-log setting says (gateway/dataplane/request-log.ts).
    if (ctx.path.startsWith('/dataplane/')) return next();
    try {
      await next();
    } finally {
      // Never the Authorization header: the key id of the caller is enough to trace a call.
      services.logger.info(
        {
          req: { id: ctx.state.requestId, method: ctx.method, path: ctx.path },
          status: ctx.status,
          ms: Math.round(performance.now() - started),
          caller: (ctx.state.caller as { id?: string } | undefined)?.id,
        },
        'request',
      );
    }
  };
}

/** Management paths callable without a key. */
const PUBLIC_PATHS = new Set(['GET /api/v1/openapi.json']);

function refuseAnonymous(publicPaths: Set<string>) {
  return async function refuseAnonymousCalls(ctx: Koa.Context, next: Koa.Next) {
    if (!ctx.state.caller && !publicPaths.has(`${ctx.method} ${ctx.path}`)) {
      throw new ApiError('unauthenticated', 'a valid API key is required (Authorization: Bearer <key>)');
    }
    await next();
  };
}

/** A body that is not JSON is refused rather than silently ignored (the caller would lose what it sent). */
function requireJsonBodies() {
  return async function refuseNonJsonBodies(ctx: Koa.Context, next: Koa.Next) {
    const hasBody = Number(ctx.get('content-length') || 0) > 0 || ctx.get('transfer-encoding') !== '';
    if (hasBody && !ctx.is('application/json', '+json')) {
      throw new ApiError(
        'invalid_request',
        'the request body must be JSON (Content-Type: application/json)',
        { status: 415 },
      );
    }
    await next();
  };
}

export function managementRouter(services: Services): { router: Router; registry: RouteRegistry } {
  const registry: RouteRegistry = { prefix: '/api/v1', specs: [] };
  const router = new Router({ prefix: registry.prefix });
  router.use(managementErrors(services.logger));
  router.use(dropCoverageAfterWrites(services.db));
  // Who is calling comes first: nobody without a key gets a body parsed.
  router.use(authenticate(apiKeyStore(services.db)));
  router.use(refuseAnonymous(PUBLIC_PATHS));
  router.use(requireJsonBodies());
  router.use(jsonBodies());
  mount(router, registry, [
    ...sourceRoutes(services),
    ...productRoutes(services),
    ...offerRoutes(services),
    ...policyRoutes(services),
    ...apiKeyRoutes(services),
    ...evidenceRoutes(services),
    ...negotiationRoutes(services),
    ...outboxRoutes(services),
    ...transferRoutes(services),
    ...connectionRoutes(services),
    ...catalogRoutes(services),
    ...settingRoutes(services),
  ]);
  const document = buildOpenApi([registry], { version: services.version });
  router.get('/openapi.json', function openApiDocument(ctx) {
    ctx.body = document;
  });
  router.all('/{*rest}', function unknownManagementRoute(ctx) {
    throw new ApiError('not_found', `no route ${ctx.method} ${ctx.path}`);
  });
  return { router, registry };
}

/** Our DID document, public: `/.well-known/did.json`, and `<path>/did.json` for a did:web with a path. */
function didDocumentRoutes(identity: { did: string; didDocument: DidDocument }): Router {
  const router = new Router();
  const paths = new Set(['/.well-known/did.json', didDocumentPath(identity.did)]);
  for (const path of paths) {
    router.get(path, function didDocument(ctx) {
      ctx.type = 'application/did+json';
      ctx.body = identity.didDocument;
    });
  }
  return router;
}

export interface ConnectorSurfaces {
  identity?: { did: string; didDocument: DidDocument };
  /** What checks calls from other connectors; without it the protocol endpoints are not served. */
  trust?: Pick<ConnectorTrust, 'verifyConnectorToken' | 'authority'>;
  /** A test profile's additions (the DSP TCK's, tck/profile; docs/decisions/0005); never set in production. */
  profile?: SurfaceProfile;
  /** Lease, request log, answer signing and checking of the data plane and gateway (main.ts). */
  dataplane?: DataPlaneRuntime;
}

/** What a test profile may add: an authentication in front of the standard one, and its own routes. */
export interface SurfaceProfile {
  /** Wraps the standard peer authentication; every caller it does not recognise must go through `standard`. */
  wrapPeerAuthentication?(standard: Koa.Middleware): Koa.Middleware;
  router?: Router;
}

export function createApp(services: Services, readiness: Readiness, surfaces: ConnectorSurfaces = {}): Koa {
  const { identity, trust } = surfaces;
  const app = new Koa({ proxy: false });
  app.silent = true;
  app.use(requestIds());
  app.use(accessLog(services));

  const probes = new Router();
  probes.get('/healthz', function healthz(ctx) {
    ctx.body = { status: 'ok' };
  });
  probes.get('/readyz', async function readyz(ctx) {
    const r = await readiness.ready();
    ctx.status = r.ok ? 200 : 503;
    ctx.body = { status: r.ok ? 'ready' : 'not_ready', checks: r.checks };
  });
  app.use(probes.routes());
  if (identity) app.use(didDocumentRoutes(identity).routes());

  const { router } = managementRouter(services);
  app.use(router.routes());

  app.use(versionRouter().routes());
  if (trust) {
    const standard = requireConnector({
      ourDid: services.connector.did,
      verify: trust.verifyConnectorToken,
      authority: trust.authority,
    });
    const authenticatePeer = surfaces.profile?.wrapPeerAuthentication?.(standard) ?? standard;
    app.use(protocolRouter(services, { authenticatePeer, policyContext: peerPolicyContext }).routes());
  }
  if (surfaces.profile?.router) app.use(surfaces.profile.router.routes());
  app.use(dataPlaneRouter(services, surfaces.dataplane).routes());
  app.use(gatewayRouter(services, surfaces.dataplane).routes());

  // Anything else: the management error shape, so that callers always get a JSON error.
  app.use(function unknownRoute(ctx) {
    ctx.status = 404;
    ctx.body = { error: { code: 'not_found', message: `no route ${ctx.method} ${ctx.path}` } };
  });
  return app;
}
