/**
 * Errors of the sample backend, in the spec's ErrorResponse shape (connector-spec.md, "Error
 * bodies", Gateway error). The backend stands in for a third-party system, so it keeps its own
 * small table rather than importing the connector's domain/errors.ts: a shared table would hide
 * a mismatch between what the connector expects and what a backend sends.
 */
import type { Middleware } from 'koa';

export const PLATFORM_VERSION = '1.0';

/** HTTP status per code. A refused write is 409 when the point can never be written, 422 when the value is wrong. */
const STATUS = {
  invalid_request: 400,
  unauthenticated: 401,
  forbidden: 403,
  not_found: 404,
  building_not_found: 404,
  point_not_found: 404,
  point_not_writable: 409,
  value_out_of_range: 422,
  type_mismatch: 422,
  upstream_unavailable: 503,
  internal: 500,
} as const;

export type BackendErrorCode = keyof typeof STATUS;

export interface ErrorResponse {
  platform_version: string;
  building_id?: string;
  error: { code: string; message: string; retryable: boolean; target?: string; retry_after?: string };
}

export class BackendError extends Error {
  readonly code: BackendErrorCode;
  readonly status: number;
  readonly target: string | undefined;
  /** ISO 8601 duration after which the same request may succeed; set only for retryable errors. */
  readonly retryAfter: string | undefined;

  constructor(
    code: BackendErrorCode,
    message: string,
    options: { target?: string; retryAfter?: string } = {},
  ) {
    super(message);
    this.name = 'BackendError';
    this.code = code;
    this.status = STATUS[code];
    this.target = options.target;
    this.retryAfter = options.retryAfter;
  }
}

/** The one error boundary: every failure leaves as an ErrorResponse, never as a stack trace. */
export function errorBoundary(): Middleware {
  return async function backendErrorBoundary(ctx, next) {
    try {
      await next();
      if (ctx.status === 404 && ctx.body === undefined) {
        throw new BackendError('not_found', `no route for ${ctx.method} ${ctx.path}`);
      }
    } catch (err) {
      const error = asBackendError(err);
      const buildingId =
        typeof ctx.params === 'object' ? (ctx.params as Record<string, string>).building_id : undefined;
      ctx.status = error.status;
      ctx.body = errorResponse(error, buildingId);
      if (error.retryAfter) ctx.set('Retry-After', String(durationSeconds(error.retryAfter)));
    }
  };
}

export function errorResponse(error: BackendError, buildingId?: string): ErrorResponse {
  return {
    platform_version: PLATFORM_VERSION,
    ...(buildingId ? { building_id: buildingId } : {}),
    error: {
      code: error.code,
      message: error.message,
      retryable: error.retryAfter !== undefined,
      ...(error.target ? { target: error.target } : {}),
      ...(error.retryAfter ? { retry_after: error.retryAfter } : {}),
    },
  };
}

function asBackendError(err: unknown): BackendError {
  if (err instanceof BackendError) return err;
  // koa-body and Koa itself throw http-errors (malformed JSON, body too large): the caller's fault.
  const status = (err as { status?: unknown }).status;
  if (typeof status === 'number' && status >= 400 && status < 500) {
    return new BackendError('invalid_request', (err as Error).message || 'request not valid');
  }
  return new BackendError('internal', 'internal error');
}

/** Seconds of a W/D/H/M/S duration such as PT30S, for the Retry-After header. */
function durationSeconds(duration: string): number {
  const units: Record<string, number> = { W: 604_800, D: 86_400, H: 3_600, M: 60, S: 1 };
  let seconds = 0;
  for (const [, amount, unit] of duration.matchAll(/(\d+)([WDHMS])/g))
    seconds += Number(amount) * (units[unit ?? 'S'] ?? 0);
  return seconds;
}
