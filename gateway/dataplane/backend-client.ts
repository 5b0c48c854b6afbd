/**
 * Calls to a holder's backend from the control side (source test, point resolution of a
 * product). Bounded connect, header and total timeouts; answers are size-capped.
 */
import { request } from 'undici';
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
    headersTimeout: TIMEOUTS.headers,
    bodyTimeout: TIMEOUTS.total,
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
  const path = `v1/buildings/${encodeURIComponent(target.link.local_id)}/points`;
  let res;
  try {
    ({ res } = await call(target, path));
  } catch (err) {
    throw new BackendCallError(
      `could not reach ${joinUrl(target.binding.base_url, path)}: ${describe(err)}`,
      null,
    );
  }
  const body = await readCapped(res.body);
  if (res.statusCode !== 200) {
    throw new BackendCallError(
      `${joinUrl(target.binding.base_url, path)} answered ${res.statusCode}`,
      res.statusCode,
    );
  }
  let parsed: { points?: Array<{ point_id?: unknown }> };
  try {
    parsed = JSON.parse(body.toString('utf8')) as typeof parsed;
  } catch {
    throw new BackendCallError(
      `${joinUrl(target.binding.base_url, path)} did not answer JSON`,
      res.statusCode,
    );
  }
  if (!Array.isArray(parsed.points))
    throw new BackendCallError(`${path}: the answer has no points list`, res.statusCode);
  return parsed.points.map((p) => p.point_id).filter((id): id is string => typeof id === 'string');
}
