/**
 * Sample building backend: a real HTTP server speaking the platform protocol for the buildings
 * of data/buildings.json (SODA Hall and Rice Hall, derived from the Brick example models).
 * The connector's data plane talks to it in tests, in the demo and in benchmarks.
 *
 *   GET  /v1/health
 *   GET  /v1/buildings/{building_id}/points            ?include=equipment,groups,locations
 *   GET  /v1/buildings/{building_id}/points/values     ?point_ids=a,b (or repeated)
 *   POST /v1/buildings/{building_id}/setpoints         {setpoints: [{point_id, value}]}
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { Router } from '@koa/router';
import Koa, { type Middleware } from 'koa';
import { koaBody } from 'koa-body';
import { loadBuildings, DEFAULT_BUILDINGS_URL } from './building-data.js';
import { BackendError, errorBoundary } from './errors.js';
import { pointsResponse } from './points.js';
import { valuesResponse } from './readings.js';
import { applySetpoints } from './setpoints.js';
import { createStore, type BuildingState, type BuildingStore } from './store.js';

export interface BuildingBackendOptions {
  /** Key → local building ids it may use, or '*' for all. */
  keys: Record<string, string[] | '*'>;
  /** Header carrying the key; matched case-insensitively. */
  authHeaderName?: string;
  /** Delay before every answer, to stand in for a real system's response time in benchmarks. */
  latencyMs?: number;
  /** Buildings whose systems are "unreachable": their endpoints answer 503 upstream_unavailable. */
  failBuilding?: string[];
  /** Defaults to data/buildings.json next to this file. */
  buildingsFile?: string | URL;
  /** Clock in epoch milliseconds; tests may pin it. */
  now?: () => number;
}

export interface RunningBuildingBackend {
  server: http.Server;
  /** Base URL without trailing slash, e.g. http://127.0.0.1:41234 */
  url: string;
  close(): Promise<void>;
}

export interface BuildingBackend {
  app: Koa;
  listen(port?: number, host?: string): Promise<RunningBuildingBackend>;
}

interface BackendState {
  allowed?: string[] | '*';
  building?: BuildingState;
}

const RETRY_AFTER_UNREACHABLE = 'PT30S';

export function createBuildingBackend(options: BuildingBackendOptions): BuildingBackend {
  const store = createStore(loadBuildings(options.buildingsFile ?? DEFAULT_BUILDINGS_URL));
  const now = options.now ?? Date.now;
  const headerName = options.authHeaderName ?? 'X-Api-Key';

  const buildings = new Router<BackendState>({ prefix: '/v1/buildings/:building_id' });
  buildings.use(
    requireKey(options.keys, headerName),
    resolveBuilding(store, new Set(options.failBuilding ?? [])),
  );
  buildings.get('/points', (ctx) => {
    ctx.body = pointsResponse(building(ctx.state), ctx.query.include, now());
  });
  buildings.get('/points/values', (ctx) => {
    ctx.body = valuesResponse(building(ctx.state), ctx.query.point_ids, now());
  });
  buildings.post(
    '/setpoints',
    koaBody({ json: true, urlencoded: false, text: false, multipart: false, jsonLimit: '1mb' }),
    (ctx) => {
      ctx.body = applySetpoints(building(ctx.state), ctx.request.body, now());
    },
  );

  const root = new Router<BackendState>();
  root.get('/v1/health', checkKeyIfSent(options.keys, headerName), (ctx) => {
    ctx.body = { status: 'ok' };
  });

  const app = new Koa<BackendState>();
  app.use(errorBoundary());
  if (options.latencyMs) app.use(artificialLatency(options.latencyMs));
  app.use(root.routes());
  app.use(buildings.routes());

  return { app, listen: (port = 0, host = '127.0.0.1') => listen(app, port, host) };
}

/** Create and listen in one step. */
export function startBuildingBackend(
  options: BuildingBackendOptions,
  port = 0,
  host = '127.0.0.1',
): Promise<RunningBuildingBackend> {
  return createBuildingBackend(options).listen(port, host);
}

function listen(app: Koa, port: number, host: string): Promise<RunningBuildingBackend> {
  const server = http.createServer(app.callback());
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      const { port: actual } = server.address() as AddressInfo;
      const hostInUrl = host.includes(':') ? `[${host}]` : host;
      resolve({
        server,
        url: `http://${hostInUrl}:${actual}`,
        close: () =>
          new Promise<void>((done, fail) => {
            server.close((err) => (err ? fail(err) : done()));
            // Keep-alive sockets of a finished client would otherwise hold close() open.
            server.closeIdleConnections();
          }),
      });
    });
  });
}

/** Missing or unknown key → 401 unauthenticated (spec "Authentication", item 6). */
function requireKey(keys: BuildingBackendOptions['keys'], headerName: string): Middleware<BackendState> {
  return async function backendRequireKey(ctx, next) {
    const key = ctx.get(headerName);
    if (!key) throw new BackendError('unauthenticated', `${headerName} header missing`);
    const allowed = Object.hasOwn(keys, key) ? keys[key] : undefined;
    if (allowed === undefined) throw new BackendError('unauthenticated', 'key not recognised');
    ctx.state.allowed = allowed;
    await next();
  };
}

/** Health needs no key, but a wrong one is still refused so a misconfigured binding shows up early. */
function checkKeyIfSent(keys: BuildingBackendOptions['keys'], headerName: string): Middleware<BackendState> {
  return async function backendCheckKeyIfSent(ctx, next) {
    const key = ctx.get(headerName);
    if (key && !Object.hasOwn(keys, key)) throw new BackendError('unauthenticated', 'key not recognised');
    await next();
  };
}

/**
 * A key limited to some buildings gets 403 for any other id, existing or not, so it cannot probe
 * which buildings exist; only a key that may use the id learns that it is unknown (404).
 */
function resolveBuilding(store: BuildingStore, failing: Set<string>): Middleware<BackendState> {
  return async function backendResolveBuilding(ctx, next) {
    const id = (ctx.params as Record<string, string>).building_id ?? '';
    const allowed = ctx.state.allowed;
    if (allowed !== '*' && !allowed?.includes(id)) {
      throw new BackendError('forbidden', `this key may not use building '${id}'`);
    }
    const state = store.get(id);
    if (!state) throw new BackendError('building_not_found', `no building '${id}'`);
    if (failing.has(id)) {
      throw new BackendError('upstream_unavailable', `the systems of building '${id}' cannot be reached`, {
        retryAfter: RETRY_AFTER_UNREACHABLE,
      });
    }
    ctx.state.building = state;
    await next();
  };
}

function artificialLatency(ms: number): Middleware {
  return async function backendLatency(_ctx, next) {
    await sleep(ms);
    await next();
  };
}

function building(state: BackendState): BuildingState {
  if (!state.building) throw new BackendError('internal', 'building not resolved');
  return state.building;
}
