/**
 * The data plane's calls to a holder's backend: only what the source binding lets through
 * (methods, path patterns), with the binding's key for the building, bounded connect, header
 * and total timeouts, and answers capped at 16 MiB (early on Content-Length, hard while
 * reading). Headers are built from scratch, so nothing of the client's request (its
 * Authorization, hop-by-hop headers, cookies) ever reaches the backend.
 */
import { EventEmitter } from 'node:events';
import type { ServerResponse } from 'node:http';
import type { Readable } from 'node:stream';
import { Agent, request, errors as undiciErrors } from 'undici';
import { pathAllowed } from '../../domain/path-patterns.js';
import { joinUrl } from './backend-client.js';
import type { BuildingBinding } from './coverage.js';
import { GatewayError, durationFromSeconds, readErrorResponse, upstreamUnavailable } from '../errors.js';
import { isKnownErrorCode, ERROR_CODES } from '../../domain/errors.js';

export const MAX_ANSWER_BYTES = 16 * 1024 * 1024;
/** Innermost budget: the backend times out before the data plane's caller (the gateway) does. */
export const BACKEND_TIMEOUTS = { connect: 3_000, headers: 10_000, total: 15_000 };

const dispatcher = new Agent({
  connect: { timeout: BACKEND_TIMEOUTS.connect },
  headersTimeout: BACKEND_TIMEOUTS.headers,
  bodyTimeout: BACKEND_TIMEOUTS.total,
  // A finite pool per backend origin; keep-alive below common server idle timeouts.
  connections: 64,
  pipelining: 1,
  keepAliveTimeout: 4_000,
  maxResponseSize: MAX_ANSWER_BYTES,
});

/**
 * What a binding lets through, worked out once per binding: its methods, and its decision for
 * each path asked (a building is read through the same two or three paths over and over).
 * Bindings live in the coverage cache for a second at most, so this lives no longer.
 */
interface BindingDecisions {
  methods: ReadonlySet<string>;
  paths: Map<string, boolean>;
}
const decisions = new WeakMap<BuildingBinding, BindingDecisions>();
const MAX_PATH_DECISIONS = 256;

/** The binding must let the method and the path through; otherwise the data plane refuses (403). */
export function checkBindingAllows(target: BuildingBinding, method: string, path: string): void {
  let known = decisions.get(target);
  if (!known) {
    known = {
      methods: new Set(target.binding.allowed_methods.map((m) => m.toUpperCase())),
      paths: new Map(),
    };
    decisions.set(target, known);
  }
  if (!known.methods.has(method.toUpperCase())) {
    throw new GatewayError(
      'forbidden',
      `the holder's binding does not let ${method} through to this building`,
    );
  }
  let allowed = known.paths.get(path);
  if (allowed === undefined) {
    allowed = pathAllowed(target.allowedPaths, path);
    if (known.paths.size >= MAX_PATH_DECISIONS) known.paths.clear();
    known.paths.set(path, allowed);
  }
  if (!allowed) {
    throw new GatewayError('forbidden', `the holder's binding does not let /${path} through`);
  }
}

/**
 * The abort signal of one outbound call. undici takes an EventEmitter with `aborted` and
 * `reason` in place of an AbortSignal (types/dispatcher.d.ts), which costs a fraction of an
 * AbortController, its EventTarget and the DOMException of every abort; calls are many, aborts rare.
 */
export class CallAbort extends EventEmitter {
  aborted = false;
  reason: unknown = undefined;

  abort(reason?: unknown): void {
    if (this.aborted) return;
    this.aborted = true;
    this.reason = reason;
    this.emit('abort');
  }
}

export interface BackendAnswer {
  status: number;
  body: Buffer;
  contentType: string | undefined;
  /** Seconds from a Retry-After header, when the backend sent one. */
  retryAfterSeconds: number | undefined;
}

function authHeader(target: BuildingBinding): Record<string, string> {
  const name = target.binding.auth_header_name;
  const value = target.link.auth_header_value ?? target.binding.auth_header_value;
  return name && value ? { [name.toLowerCase()]: value } : {};
}

/**
 * Reads a body up to the cap; crossing it aborts the call. Events rather than async iteration
 * (one promise per answer, not per chunk), and a body of one chunk is not copied.
 */
export function readCapped(body: Readable, abort: () => void, what: string): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    body.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > MAX_ANSWER_BYTES) {
        chunks.length = 0;
        abort();
        body.destroy();
        reject(upstreamUnavailable(`${what} answered more than 16 MiB`, false));
        return;
      }
      chunks.push(chunk);
    });
    body.once('end', () => resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size)));
    body.once('error', reject);
  });
}

export function describeNetworkError(err: unknown): string {
  const e = err as { code?: string; name?: string; message?: string };
  if (
    e.name === 'TimeoutError' ||
    e.code === 'UND_ERR_HEADERS_TIMEOUT' ||
    e.code === 'UND_ERR_BODY_TIMEOUT' ||
    e.code === 'UND_ERR_CONNECT_TIMEOUT'
  )
    return 'did not answer in time';
  if (e.code === 'ECONNREFUSED') return 'refused the connection';
  if (e.code === 'ENOTFOUND' || e.code === 'EAI_AGAIN') return 'could not be found';
  if (e.code === 'UND_ERR_RES_EXCEEDED_MAX_SIZE') return 'answered more than 16 MiB';
  return 'could not be reached';
}

export async function callBackend(input: {
  target: BuildingBinding;
  method: string;
  /** Below the binding's base URL, without a leading slash, e.g. `v1/buildings/soda-hall/points`. */
  path: string;
  query?: URLSearchParams;
  body?: Buffer;
  /** Our own caller's response: when it closes before it is written, the backend call stops too. */
  caller?: ServerResponse;
  requestId?: string;
}): Promise<BackendAnswer> {
  const { target } = input;
  checkBindingAllows(target, input.method, input.path);
  const qs = input.query?.toString();
  const url = joinUrl(target.binding.base_url, input.path) + (qs ? `?${qs}` : '');
  // One signal and one timer per call (AbortSignal.any/timeout cost more, and their timers
  // outlive the call).
  const signal = new CallAbort();
  const abort = (reason?: unknown) => signal.abort(reason);
  const timer = setTimeout(
    () => abort(new DOMException("the holder's backend did not answer in time", 'TimeoutError')),
    BACKEND_TIMEOUTS.total,
  );
  let callerGone = false;
  const caller = input.caller;
  const onCallerClose = () => {
    if (caller!.writableFinished) return;
    callerGone = true;
    abort();
  };
  if (caller?.destroyed) onCallerClose();
  caller?.once('close', onCallerClose);
  try {
    const res = await request(url, {
      method: input.method.toUpperCase() as 'GET',
      headers: {
        accept: 'application/json',
        // Compressed answers would slip past the cap; the backend sends identity.
        'accept-encoding': 'identity',
        ...(input.requestId ? { 'x-request-id': input.requestId } : {}),
        ...(input.body ? { 'content-type': 'application/json' } : {}),
        ...authHeader(target),
      },
      ...(input.body ? { body: input.body } : {}),
      dispatcher,
      signal,
    });
    const length = Number(res.headers['content-length'] ?? NaN);
    if (length > MAX_ANSWER_BYTES) {
      abort();
      res.body.destroy();
      throw upstreamUnavailable("the holder's backend answered more than 16 MiB", false);
    }
    const body = await readCapped(res.body, () => abort(), "the holder's backend");
    const retryAfter = Number(res.headers['retry-after']);
    const contentType = res.headers['content-type'];
    return {
      status: res.statusCode,
      body,
      contentType: typeof contentType === 'string' ? contentType : undefined,
      retryAfterSeconds: Number.isFinite(retryAfter) && retryAfter >= 0 ? retryAfter : undefined,
    };
  } catch (err) {
    if (err instanceof GatewayError) throw err;
    if (callerGone) throw err; // our caller is gone; nobody reads the answer
    const size = err instanceof undiciErrors.ResponseExceededMaxSizeError;
    throw upstreamUnavailable(`the holder's backend ${describeNetworkError(err)}`, !size, { cause: err });
  } finally {
    clearTimeout(timer);
    caller?.off('close', onCallerClose);
  }
}

/** Codes a backend may not hand to our client as they are: they concern the data plane's own key. */
const KEY_REFUSALS = new Set(['unauthenticated', 'forbidden']);
/** Codes only connectors answer with; a backend using them means something else went wrong. */
const OURS_ONLY = new Set(['standby', 'evidence_unavailable', 'internal', 'cross_site_request', 'conflict']);

/**
 * A backend's refusal, passed on in our shape (never its raw body) and marked as the backend's.
 * A refusal of the data plane's own key becomes upstream_unavailable: the application's key is
 * fine, the holder's binding is not.
 */
export function backendRefusal(answer: BackendAnswer): GatewayError {
  let parsed: unknown;
  try {
    parsed = JSON.parse(answer.body.toString('utf8'));
  } catch {
    parsed = undefined;
  }
  const read = readErrorResponse(parsed);
  const status = answer.status;
  const serverSide = status >= 500;
  if (!read) {
    return upstreamUnavailable(`the holder's backend answered ${status} without an error body`, serverSide, {
      origin: 'dataplane',
    });
  }
  const { error } = read;
  if (KEY_REFUSALS.has(error.code)) {
    return upstreamUnavailable(
      `the holder's backend refused the data plane's key for this building (${error.code}: ${error.message})`,
      false,
      { origin: 'dataplane' },
    );
  }
  if (OURS_ONLY.has(error.code)) {
    return upstreamUnavailable(`the holder's backend failed (${error.code}: ${error.message})`, serverSide, {
      origin: 'backend',
    });
  }
  const known = isKnownErrorCode(error.code) ? ERROR_CODES[error.code] : undefined;
  const retryable = error.retryable ?? known?.retryable ?? serverSide;
  const retryAfter =
    error.retry_after ??
    (answer.retryAfterSeconds !== undefined ? durationFromSeconds(answer.retryAfterSeconds) : undefined);
  return new GatewayError(error.code, error.message, {
    status: status >= 400 && status <= 599 ? status : (known?.status ?? 502),
    retryable,
    ...(error.target ? { target: error.target } : {}),
    ...(retryAfter ? { retryAfter } : {}),
    ...(error.details ? { details: error.details } : {}),
    origin: 'backend',
  });
}
