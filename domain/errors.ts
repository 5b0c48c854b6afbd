/**
 * Every error code the connector answers with, in one table: its HTTP status and whether the
 * same request may succeed later. Codes are stable (spec "Errors"); messages are for people.
 * Clients, including our own CLI and tests, must accept codes that are not in this table.
 */
export const ERROR_CODES = {
  // Management interface
  invalid_request: { status: 400, retryable: false },
  unauthenticated: { status: 401, retryable: false },
  forbidden: { status: 403, retryable: false },
  cross_site_request: { status: 403, retryable: false },
  not_found: { status: 404, retryable: false },
  conflict: { status: 409, retryable: false },
  upstream_unavailable: { status: 502, retryable: true },
  unavailable: { status: 503, retryable: true },
  internal: { status: 500, retryable: false },
  // Gateway and backend codes (spec "Errors": proposal, extensions, and our own two)
  building_not_found: { status: 404, retryable: false },
  point_not_writable: { status: 409, retryable: false },
  value_out_of_range: { status: 422, retryable: false },
  unit_mismatch: { status: 422, retryable: false },
  type_mismatch: { status: 422, retryable: false },
  rate_limited: { status: 429, retryable: true },
  point_not_found: { status: 404, retryable: false },
  target_not_found: { status: 404, retryable: false },
  command_not_supported: { status: 501, retryable: false },
  expired: { status: 410, retryable: false },
  evidence_unavailable: { status: 503, retryable: true },
  standby: { status: 503, retryable: true },
} as const;

export type ErrorCode = keyof typeof ERROR_CODES;

export function isKnownErrorCode(code: string): code is ErrorCode {
  return Object.hasOwn(ERROR_CODES, code);
}

/** The one error type of the connector: a stable code, a message for people, an HTTP status. */
export class ApiError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  /** The field at fault, when one is (e.g. `backend.allowed_methods`). */
  readonly target: string | undefined;

  constructor(
    code: ErrorCode,
    message: string,
    options: { status?: number; target?: string; cause?: unknown } = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'ApiError';
    this.code = code;
    this.status = options.status ?? ERROR_CODES[code].status;
    this.target = options.target;
  }
}

export const invalidRequest = (message: string, target?: string): ApiError =>
  new ApiError('invalid_request', target ? `${target}: ${message}` : message, target ? { target } : {});
export const notFound = (what: string, id: string): ApiError =>
  new ApiError('not_found', `${what} '${id}' does not exist`);
export const conflict = (message: string): ApiError => new ApiError('conflict', message);
