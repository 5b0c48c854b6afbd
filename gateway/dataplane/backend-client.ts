/**
 * Calls to a holder's backend from the control side (source test, point resolution of a
 * product). Bounded connect, header and total timeouts; answers are size-capped.
 */
import { Agent, request } from 'undici';
import type { BackendBinding, LinkDetail } from '../../domain/sources.js';

export interface BackendTarget {
  binding: BackendBinding;
  /** The link for the object, when the call concerns one building. */
  link?: LinkDetail;
}

export class BackendCallError extends Error {
  constructor(
    message: string,
    readonly status: number | null,
  ) {
    super(message);
    this.name = 'BackendCallError';
  }
}

const TIMEOUTS = { connect: 3_000, headers: 5_000, total: 10_000 };
const MAX_CONTROL_ANSWER = 16 * 1024 * 1024;

/** One pool for control-side calls, with the connect timeout bounded too. */
const dispatcher = new Agent({
  connect: { timeout: TIMEOUTS.connect },
  headersTimeout: TIMEOUTS.headers,
  bodyTimeout: TIMEOUTS.total,
});

export function joinUrl(base: string, path: string): string {
  return `${base.replace(/\/+$/, '')}/${path.replace(/^\/+/, '')}`;
}

function authHeaders(target: BackendTarget): Record<string, string> {
  const name = target.binding.auth_header_name;
  const value = target.link?.auth_header_value ?? target.binding.auth_header_value;
  return name && value ? { [name.toLowerCase()]: value } : {};
}

async function call(target: BackendTarget, path: string) {
  const url = joinUrl(target.binding.base_url, path);
  const started = performance.now();
  const res = await request(url, {
    method: 'GET',
    headers: { accept: 'application/json', ...authHeaders(target) },
    dispatcher,
    signal: AbortSignal.timeout(TIMEOUTS.total),
  });
  return { res, url, started };
}

async function readCapped(body: AsyncIterable<Buffer>): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    size += chunk.length;
    if (size > MAX_CONTROL_ANSWER) throw new BackendCallError('the answer is larger than 16 MiB', null);
    chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}

export interface HealthResult {
  reachable: boolean;
  status: number | null;
  latency_ms: number;
  url: string;
  error: string | null;
}

/** Asks the source's health path with the system's key: reachable means a 2xx answer. */
export async function probeHealth(binding: BackendBinding, healthPath: string | null): Promise<HealthResult> {
  const started = performance.now();
  const url = joinUrl(binding.base_url, healthPath ?? '');
  try {
    const { res } = await call({ binding }, healthPath ?? '');
    await res.body.dump();
    const ok = res.statusCode >= 200 && res.statusCode < 300;
    return {
      reachable: ok,
      status: res.statusCode,
      latency_ms: Math.round(performance.now() - started),
      url,
      error: ok ? null : `the system answered ${res.statusCode}`,
    };
  } catch (err) {
    return {
      reachable: false,
      status: null,
      latency_ms: Math.round(performance.now() - started),
      url,
      error: describe(err),
    };
  }
}

function describe(err: unknown): string {
  const e = err as { code?: string; name?: string; message?: string };
  if (
    e.name === 'TimeoutError' ||
    e.code === 'UND_ERR_HEADERS_TIMEOUT' ||
    e.code === 'UND_ERR_CONNECT_TIMEOUT'
  )
    return 'timed out';
  if (e.code === 'ECONNREFUSED') return 'connection refused';
  if (e.code === 'ENOTFOUND') return 'host not found';
  return e.message ?? String(err);
}

/** The point ids a platform backend lists for one building (`GET v1/buildings/{local id}/points`). */
export async function listPointIds(target: BackendTarget & { link: LinkDetail }): Promise<string[]> {
  // Local ids are restricted to path-safe characters (api/management/schemas.ts), so they go in as they are.
  const path = `v1/buildings/${target.link.local_id}/points`;
  const where = joinUrl(target.binding.base_url, path);
  let status: number | null = null;
  let parsed: unknown;
  try {
    const { res } = await call(target, path);
    status = res.statusCode;
    const body = await readCapped(res.body);
    if (status !== 200) throw new BackendCallError(`${where} answered ${status}`, status);
    parsed = JSON.parse(body.toString('utf8'));
  } catch (err) {
    if (err instanceof BackendCallError) throw err;
    // Network errors, a connection cut mid-answer, timeouts, a body that is not JSON.
    const what = err instanceof SyntaxError ? 'did not answer JSON' : `could not be read: ${describe(err)}`;
    throw new BackendCallError(`${where} ${what}`, status);
  }
  const points = (parsed as { points?: unknown } | null)?.points;
  if (!Array.isArray(points)) throw new BackendCallError(`${where}: the answer has no points list`, status);
  return points
    .map((p) => (p !== null && typeof p === 'object' ? (p as { point_id?: unknown }).point_id : undefined))
    .filter((id): id is string => typeof id === 'string' && id.length > 0);
}
