import type { Context, Next } from 'koa';
import type { Logger } from 'pino';
import { ApiError } from '../../domain/errors.js';

/** Errors thrown by koa-body and Koa itself carry an HTTP status; map them to our codes. */
function fromHttpError(err: { status?: number; message?: string; expose?: boolean }): ApiError | undefined {
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
      const apiError = err instanceof ApiError ? err : fromHttpError(err as { status?: number });
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
