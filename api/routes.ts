/**
 * Routes are declared once, with the joi schemas that validate them; the same declarations
 * produce the OpenAPI document (api/openapi.ts), so validation and documentation cannot drift.
 */
import type Joi from 'joi';
import type Router from '@koa/router';
import type { Context } from 'koa';
import { ApiError } from '../domain/errors.js';
import { roleAtLeast, type Role } from '../auth/roles.js';
import { validate } from './validation.js';
import type { Caller } from './middleware/authenticate.js';

export interface RouteSpec<P = Record<string, string>, Q = Record<string, unknown>, B = unknown> {
  method: 'get' | 'post' | 'put' | 'delete';
  /** Koa-style path relative to the router's prefix, e.g. `/sources/:id`. */
  path: string;
  summary: string;
  tag: string;
  /** The least role that may call it; null for public routes. */
  role: Role | null;
  params?: Joi.ObjectSchema;
  query?: Joi.ObjectSchema;
  body?: Joi.Schema;
  response?: Joi.Schema;
  status?: number;
  /** Codes this operation answers with besides the generic ones, for the document. */
  errors?: string[];
  handler: (req: {
    params: P;
    query: Q;
    body: B;
    caller: Caller | undefined;
    ctx: Context;
  }) => Promise<unknown>;
}

export interface RouteRegistry {
  prefix: string;
  specs: AnyRoute[];
}

export function route<P = Record<string, string>, Q = Record<string, unknown>, B = unknown>(
  spec: RouteSpec<P, Q, B>,
): AnyRoute {
  return spec as AnyRoute;
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- routes of different shapes live in one list
export type AnyRoute = RouteSpec<any, any, any>;

/** Mounts declared routes on a router: authorization by role, validation, then the handler. */
export function mount(router: Router, registry: RouteRegistry, specs: AnyRoute[]): void {
  for (const spec of specs) {
    registry.specs.push(spec);
    router[spec.method](spec.path, async function handleRoute(ctx) {
      const caller = ctx.state.caller as Caller | undefined;
      if (spec.role !== null) {
        if (!caller)
          throw new ApiError('unauthenticated', 'a valid API key is required (Authorization: Bearer <key>)');
        if (!roleAtLeast(caller.role, spec.role)) {
          throw new ApiError(
            'forbidden',
            `this operation needs the ${spec.role} role; the key has ${caller.role}`,
          );
        }
      }
      const params = spec.params ? validate(spec.params, ctx.params, 'path') : ctx.params;
      const query = spec.query ? validate(spec.query, ctx.query, 'query') : ctx.query;
      const body = spec.body
        ? validate(spec.body, (ctx.request as { body?: unknown }).body ?? {}, 'body')
        : undefined;
      const result = await spec.handler({ params, query, body, caller, ctx });
      ctx.status = spec.status ?? 200;
      if (result !== undefined) ctx.body = result;
    });
  }
}
