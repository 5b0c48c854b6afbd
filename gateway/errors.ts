/**
 * The ErrorResponse of the building endpoints (spec "Error bodies", gateway error): one error
 * type for the gateway and the data plane, and the middleware that renders it.
 *
 * Who refused is told by the `PL-Error-Origin` header: `gateway` (the consumer's connector),
 * `dataplane` (the provider's connector) or `backend` (the holder's system, passed on in this
 * shape, never its raw body). The body itself is the spec's shape in every case.
 */
import type { Context, Next } from 'koa';
import type { Logger } from 'pino';
import { ApiError, ERROR_CODES, isKnownErrorCode } from '../domain/errors.js';
import { formatDuration, parseDurationMs } from '../domain/duration.js';

/** The platform protocol version we speak; every gateway answer carries a 1.x version. */
export const PLATFORM_VERSION = '1.0';
export const PLATFORM_VERSION_PATTERN = /^1\.\d+$/;

export const ERROR_ORIGINS = ['gateway', 'dataplane', 'backend'] as const;
export type ErrorOrigin = (typeof ERROR_ORIGINS)[number];
export const ERROR_ORIGIN_HEADER = 'PL-Error-Origin';

export interface ErrorDetail {
  code: string;
  message: string;
  retryable?: boolean;
  target?: string;
  retry_after?: string;
  details?: ErrorDetail[];
}

export interface ErrorResponse {
  platform_version: string;
  building_id?: string;
  error: ErrorDetail & { retryable: boolean };
}

/** How long a client should wait before the same request may succeed, per retryable code. */
const RETRY_AFTER: Record<string, string> = {
  upstream_unavailable: 'PT30S',
  unavailable: 'PT30S',
  standby: 'PT5S',
  evidence_unavailable: 'PT10S',
  rate_limited: 'PT1M',
};
const FALLBACK_RETRY_AFTER = 'PT30S';

export class GatewayError extends Error {
  readonly code: string;
  readonly status: number;
  readonly retryable: boolean;
  readonly target: string | undefined;
  readonly retryAfter: string | undefined;
  readonly details: ErrorDetail[] | undefined;
  readonly origin: ErrorOrigin | undefined;

  constructor(
    code: string,
    message: string,
    options: {
      status?: number;
      retryable?: boolean;
      target?: string;
      retryAfter?: string;
      details?: ErrorDetail[];
      /** Defaults to the surface that renders it. */
      origin?: ErrorOrigin;
      cause?: unknown;
    } = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'GatewayError';
    const known = isKnownErrorCode(code) ? ERROR_CODES[code] : undefined;
    this.code = code;
    this.status = options.status ?? known?.status ?? 500;
    this.retryable = options.retryable ?? known?.retryable ?? false;
    this.target = options.target;
    // retry_after on every retryable error (spec "Gateway", ErrorResponse).
    this.retryAfter = this.retryable
      ? (options.retryAfter ?? RETRY_AFTER[code] ?? FALLBACK_RETRY_AFTER)
      : undefined;
    this.details = options.details;
    this.origin = options.origin;
  }

  static from(err: ApiError): GatewayError {
    return new GatewayError(err.code, err.message, {
      status: err.status,
      ...(err.target ? { target: err.target } : {}),
    });
  }
}

/** upstream_unavailable with an explicit retryability (the spec names both kinds). */
export const upstreamUnavailable = (
  message: string,
  retryable: boolean,
  options: {
    status?: number;
    retryAfter?: string;
    origin?: ErrorOrigin;
    details?: ErrorDetail[];
    cause?: unknown;
  } = {},
): GatewayError =>
  new GatewayError('upstream_unavailable', message, {
    status: options.status ?? (retryable ? 503 : 502),
    retryable,
    ...options,
  });

export function errorResponse(err: GatewayError, buildingId: string | undefined): ErrorResponse {
  return {
    platform_version: PLATFORM_VERSION,
    ...(buildingId ? { building_id: buildingId } : {}),
    error: {
      code: err.code,
      message: err.message,
      retryable: err.retryable,
      ...(err.target ? { target: err.target } : {}),
      ...(err.retryAfter ? { retry_after: err.retryAfter } : {}),
      ...(err.details?.length ? { details: err.details } : {}),
    },
  };
}

/** `Retry-After` in whole seconds beside the body's ISO duration, for generic HTTP clients. */
export function retryAfterSeconds(duration: string): number {
  return Math.max(1, Math.ceil((parseDurationMs(duration) ?? 30_000) / 1000));
}

/** Errors from Koa or koa-body (they carry an HTTP status) in our codes. */
function fromHttpError(err: { status?: number; code?: string }): GatewayError | undefined {
  if (typeof err.code === 'string' && err.code.startsWith('Z_'))
    return new GatewayError('invalid_request', 'the request body could not be decoded (Content-Encoding)');
  const status = err.status;
  if (typeof status !== 'number' || status < 400 || status >= 500) return undefined;
  if (status === 413) return new GatewayError('invalid_request', 'the request body is too large', { status });
  if (status === 415) return new GatewayError('invalid_request', 'the request body must be JSON', { status });
  return new GatewayError('invalid_request', 'the request body is not valid JSON');
}

/**
 * The one error boundary of a building surface: every failure becomes an ErrorResponse with
 * `building_id` when the request addressed a building; nothing of a stack trace gets out.
 */
export function buildingErrors(logger: Logger, surface: ErrorOrigin) {
  return async function renderBuildingErrors(ctx: Context, next: Next) {
    try {
      await next();
      if (ctx.status === 404 && ctx.body === undefined) {
        throw new GatewayError('not_found', `no route ${ctx.method} ${ctx.path}`);
      }
    } catch (thrown) {
      let err: GatewayError;
      if (thrown instanceof GatewayError) err = thrown;
      else if (thrown instanceof ApiError) err = GatewayError.from(thrown);
      else {
        const http = fromHttpError(thrown as { status?: number; code?: string });
        if (http) err = http;
        else {
          logger.error({ err: thrown, requestId: ctx.state.requestId, path: ctx.path }, 'unhandled error');
          err = new GatewayError('internal', `internal error (request ${String(ctx.state.requestId)})`);
        }
      }
      renderBuildingError(ctx, err, surface);
    }
  };
}

/** Puts an ErrorResponse on the answer: status, origin, Retry-After and the body. */
export function renderBuildingError(ctx: Context, err: GatewayError, surface: ErrorOrigin): void {
  ctx.state.error = err;
  ctx.status = err.status;
  ctx.set(ERROR_ORIGIN_HEADER, err.origin ?? surface);
  if (err.retryAfter) ctx.set('Retry-After', String(retryAfterSeconds(err.retryAfter)));
  else ctx.remove('Retry-After');
  ctx.body = errorResponse(err, ctx.state.buildingId as string | undefined);
}

const MAX_MESSAGE = 1000;
const MAX_DETAILS = 20;

/**
 * An ErrorResponse read from elsewhere (a backend, a data plane), checked field by field and
 * rebuilt: only the spec's fields pass, each with its type, and nesting is bounded. Undefined
 * when the value does not have the shape.
 */
export function readErrorResponse(
  value: unknown,
): { error: ErrorDetail & { retryable: boolean | undefined } } | undefined {
  const error = (value as { error?: unknown } | null)?.error;
  const detail = readDetail(error, 0);
  if (!detail) return undefined;
  return { error: { ...detail, retryable: detail.retryable } };
}

function readDetail(value: unknown, depth: number): ErrorDetail | undefined {
  if (!value || typeof value !== 'object' || Array.isArray(value)) return undefined;
  const v = value as Record<string, unknown>;
  if (typeof v.code !== 'string' || !/^[a-z][a-z0-9_]{0,63}$/.test(v.code)) return undefined;
  const message =
    typeof v.message === 'string' && v.message !== '' ? v.message.slice(0, MAX_MESSAGE) : v.code;
  const out: ErrorDetail = { code: v.code, message };
  if (typeof v.retryable === 'boolean') out.retryable = v.retryable;
  if (typeof v.target === 'string' && v.target !== '') out.target = v.target.slice(0, 200);
  if (typeof v.retry_after === 'string' && parseDurationMs(v.retry_after) !== null)
    out.retry_after = v.retry_after;
  if (Array.isArray(v.details) && depth < 3) {
    const details = v.details
      .slice(0, MAX_DETAILS)
      .map((d) => readDetail(d, depth + 1))
      .filter((d): d is ErrorDetail => d !== undefined);
    if (details.length) out.details = details;
  }
  return out;
}

/** A canonical retry_after for a Retry-After header given in seconds. */
export const durationFromSeconds = (seconds: number): string => formatDuration(seconds * 1000);
