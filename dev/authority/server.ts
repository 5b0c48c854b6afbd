/**
 * A stand-in for the data-space authority's member registry: a real HTTP server (Koa) holding
 * members in memory, seeded from options and changed through a small admin API. Connectors ask
 * it whether a caller is an active member (auth/authority.ts). API: docs/authority.md.
 */
import http from 'node:http';
import { randomBytes } from 'node:crypto';
import Koa from 'koa';
import Router from '@koa/router';
import { koaBody } from 'koa-body';
import Joi from 'joi';

export interface AuthorityMember {
  did: string;
  name: string;
  roles: string[];
  active: boolean;
}

export interface AuthorityOptions {
  members?: AuthorityMember[];
  /** Bearer token of the admin API; a random one when not given. */
  adminToken?: string;
}

export interface RunningAuthority {
  url: string;
  adminToken: string;
  /** Member look-ups answered so far (tests use it to see caching at the connectors). */
  readonly lookups: number;
  /** Adds or replaces a member directly (the admin API does the same over HTTP). */
  upsert(member: AuthorityMember): void;
  close(): Promise<void>;
}

const memberSchema = Joi.object({
  name: Joi.string().min(1).max(200).required(),
  roles: Joi.array().items(Joi.string().min(1).max(100)).max(50).default([]),
  active: Joi.boolean().default(true),
});

class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

function errors() {
  return async function renderErrors(ctx: Koa.Context, next: Koa.Next) {
    try {
      await next();
      if (ctx.status === 404 && ctx.body === undefined)
        throw new HttpError(404, 'not_found', `no route ${ctx.method} ${ctx.path}`);
    } catch (err) {
      const e =
        err instanceof HttpError
          ? err
          : new HttpError((err as { status?: number }).status ?? 500, 'invalid_request', 'bad request');
      ctx.status = e.status;
      ctx.body = { error: { code: e.status === 500 ? 'internal' : e.code, message: e.message } };
    }
  };
}

function requireAdmin(token: string) {
  return async function requireAdminToken(ctx: Koa.Context, next: Koa.Next) {
    if (ctx.get('authorization') !== `Bearer ${token}`)
      throw new HttpError(401, 'unauthenticated', 'the admin token is required');
    await next();
  };
}

export function createAuthorityApp(
  registry: Map<string, AuthorityMember>,
  adminToken: string,
  counter: { lookups: number },
): Koa {
  const app = new Koa();
  app.silent = true;
  app.use(errors());

  const open = new Router();
  open.get('/healthz', function healthz(ctx) {
    ctx.body = { status: 'ok' };
  });
  // The look-up connectors make; Koa decodes the percent-encoded DID in the path.
  open.get('/v1/members/:did', function lookUpMember(ctx) {
    counter.lookups += 1;
    const member = registry.get(ctx.params.did!);
    if (!member) throw new HttpError(404, 'not_found', `${ctx.params.did} is not a member`);
    ctx.body = member;
  });
  app.use(open.routes());

  const admin = new Router({ prefix: '/admin/v1' });
  admin.use(requireAdmin(adminToken));
  admin.use(
    koaBody({
      json: true,
      jsonStrict: true,
      urlencoded: false,
      multipart: false,
      text: false,
      jsonLimit: '64kb',
    }),
  );
  admin.get('/members', function listMembers(ctx) {
    ctx.body = { items: [...registry.values()] };
  });
  admin.put('/members/:did', function putMember(ctx) {
    const did = ctx.params.did!;
    if (!/^did:[a-z0-9]+:\S+$/.test(did)) throw new HttpError(400, 'invalid_request', 'did: not a DID');
    const { error, value } = memberSchema.validate(ctx.request.body ?? {}, { abortEarly: true });
    if (error) throw new HttpError(400, 'invalid_request', error.message);
    const existed = registry.has(did);
    const member = { did, ...(value as Omit<AuthorityMember, 'did'>) };
    registry.set(did, member);
    ctx.status = existed ? 200 : 201;
    ctx.body = member;
  });
  admin.delete('/members/:did', function removeMember(ctx) {
    if (!registry.delete(ctx.params.did!))
      throw new HttpError(404, 'not_found', `${ctx.params.did} is not a member`);
    ctx.status = 204;
  });
  app.use(admin.routes());
  return app;
}

export async function startAuthority(
  options: AuthorityOptions = {},
  port = 0,
  host = '127.0.0.1',
): Promise<RunningAuthority> {
  const registry = new Map((options.members ?? []).map((m) => [m.did, { ...m }]));
  const adminToken = options.adminToken ?? randomBytes(16).toString('hex');
  const counter = { lookups: 0 };
  const server = http.createServer(createAuthorityApp(registry, adminToken, counter).callback());
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve());
  });
  const address = server.address() as { port: number };
  return {
    url: `http://${host}:${address.port}`,
    adminToken,
    get lookups() {
      return counter.lookups;
    },
    upsert(member) {
      registry.set(member.did, { ...member });
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
