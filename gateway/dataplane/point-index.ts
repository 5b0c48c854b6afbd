/**
 * The point list of a building, kept for a few seconds per backend binding: `/points/values`
 * needs each point's value_type (a reading must match it) and whether an id exists at all,
 * and asking the backend for the whole list on every values call would double its load.
 * Concurrent misses share one backend call.
 */
import { hash } from 'node:crypto';
import type { BuildingBinding } from './coverage.js';
import type { Point } from '../schemas.js';

const TTL_MS = 10_000;
const MAX_ENTRIES = 500;

interface Entry {
  at: number;
  points: Promise<ReadonlyMap<string, Point>>;
}

const cache = new Map<string, Entry>();

/** One building as one backend key sees it (different keys may see different buildings). */
export function bindingKey(target: BuildingBinding): string {
  const secret = target.link.auth_header_value ?? target.binding.auth_header_value ?? '';
  // The key itself is not kept in memory here.
  const keyHash = hash('sha256', secret, 'base64url').slice(0, 16);
  return `${target.binding.base_url}\n${target.link.local_id}\n${keyHash}`;
}

export function cachedPointIndex(
  target: BuildingBinding,
  load: () => Promise<Point[]>,
  now = Date.now(),
): Promise<ReadonlyMap<string, Point>> {
  const key = bindingKey(target);
  const hit = cache.get(key);
  if (hit && now - hit.at < TTL_MS) return hit.points;
  const points = load().then((list) => new Map(list.map((p) => [p.point_id, p])));
  // A failed load is not kept: the next request asks again.
  points.catch(() => cache.delete(key));
  if (cache.size >= MAX_ENTRIES) cache.delete(cache.keys().next().value!);
  cache.set(key, { at: now, points });
  return points;
}
