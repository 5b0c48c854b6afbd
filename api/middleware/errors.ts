import type { Context, Next } from 'koa';
import type { Logger } from 'pino';
import { ApiError } from '../../domain/errors.js';

/** Errors thrown by koa-body and Koa itself carry an HTTP status; map them to our codes. */
function fromHttpError(err: { status?: number; message?: string; code?: string }): ApiError | undefined {
  // A body whose Content-Encoding does not match its bytes.
  if (typeof err.code === 'string' && err.code.startsWith('Z_')) {
    return new ApiError('invalid_request', 'the request body could not be decoded (Content-Encoding)');
  }
  // PostgreSQL class 22 (data exception): e.g. a NUL character, which text columns cannot hold.
  if (typeof err.code === 'string' && /^22[0-9A-Z]{3}$/.test(err.code)) {
    return new ApiError(
      'invalid_request',
      'a value in the request cannot be stored (for example a NUL character)',
    );
  }
  const status = err.status;
  if (typeof status !== 'number' || status < 400 || status >= 500) return undefined;
  if (status === 413)
    return new ApiError('invalid_request', 'the request body is too large', { status: 413 });
  if (status === 415)
    return new ApiError('invalid_request', 'the request body must be JSON', { status: 415 });
  if (status === 400) return new ApiError('invalid_request', `the request body is not valid JSON`);
  return undefined;
}

/**
 * The one error boundary of the management surface: every failure becomes
 * `{error:{code,message}}`; nothing of a stack trace reaches the caller.
 */
export function managementErrors(logger: Logger) {
  return async function renderManagementErrors(ctx: Context, next: Next) {
    try {
      await next();
      if (ctx.status === 404 && ctx.body === undefined) {
        throw new ApiError('not_found', `no route ${ctx.method} ${ctx.path}`);
      }
      if (ctx.status === 405 || ctx.status === 501) {
        throw new ApiError('not_found', `no route ${ctx.method} ${ctx.path}`);
      }
    } catch (err) {
      const apiError =
        err instanceof ApiError ? err : fromHttpError(err as { status?: number; code?: string });
      if (apiError) {
        ctx.status = apiError.status;
        ctx.body = { error: { code: apiError.code, message: apiError.message } };
        return;
      }
      logger.error({ err, requestId: ctx.state.requestId, path: ctx.path }, 'unhandled error');
      ctx.status = 500;
      ctx.body = {
        error: { code: 'internal', message: `internal error (request ${String(ctx.state.requestId)})` },
      };
    }
  };
}
