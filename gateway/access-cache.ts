/**
 * In-process caches of the access decisions on the gateway's and the data plane's hot path:
 * API keys (db/api-keys.ts), the applications allowed on a connection and the connection's
 * route (gateway/router.ts), a transfer token's grant and an agreement's coverage
 * (gateway/dataplane/). Without them every gateway request costs six database round trips.
 *
 * Consistency rule: a change that takes access away is in force for the next request.
 *
 * - Every write that can take access away calls a hook here once it has committed: revoking an
 *   API key, changing or removing a connection or its applications, recording a consumer
 *   transfer's state or data address, revoking, issuing or retiring transfer tokens. The hook
 *   drops the affected entries of this process's caches synchronously, before the write's
 *   caller goes on (the worker's activities and the API share the process in `npm start`), and
 *   sends `NOTIFY access_changed` so every other process drops them too, within milliseconds.
 *   The notice is sent in the writer's transaction where we own it, so it leaves if and only if
 *   the change commits.
 * - A process caches only while its listening connection (gateway/dataplane/notifications.ts)
 *   is up: while it is down notices would be lost, so every read goes to the database, and
 *   after each (re)connect the caches start empty.
 * - Entries live at most ACCESS_CACHE_TTL_MS (1 s), the safety net for what no hook sees: a
 *   notice lost on a connection that died silently, a change made by hand in the database, or
 *   edits of products and sources, which only narrow an agreement's coverage within that second.
 *   A token's grant never outlives the token's expiry as the database counts it.
 * - Concurrent misses share one load. A load's entry is in the map from the moment it starts,
 *   so a drop that comes while it is in flight removes it: a value read before a change
 *   committed never stays cached after the change's hook ran.
 */
import { EventEmitter } from 'node:events';
import type { Knex } from 'knex';
import type { Context, Next } from 'koa';
import type { ApiKeyRecord } from '../db/api-keys.js';
import type { AppAccess, GatewayRoute } from '../db/connections.js';
import type { TransferGrant } from './dataplane/access.js';
import type { CoverageFacts, CoverageRefusal } from './dataplane/coverage.js';

type ApiKeyVerification = ApiKeyRecord & { secret_hash: string };

/** A valid token's grant, with the time it had left when it was read (database clock). */
export interface CachedGrant {
  grant: TransferGrant;
  remainingMs: number;
}

export const ACCESS_CHANNEL = 'access_changed';
export const ACCESS_CACHE_TTL_MS = 1_000;
/** Per cache; beyond it the oldest entry goes (an attacker's junk cannot grow memory). */
const MAX_ENTRIES = 10_000;

export type AccessChange =
  | { kind: 'api_key'; id: string }
  | { kind: 'connection'; alias: string }
  | { kind: 'transfer'; id: string }
  | { kind: 'agreement'; id: string }
  /** Sources, products or offers changed: every agreement's coverage is built anew. */
  | { kind: 'coverage' }
  | { kind: 'all' };

interface Entry<V> {
  until: number;
  value: Promise<V>;
  /** Set once the load has succeeded. */
  settled?: { value: V };
}

/** One cache: string keys, single-flight loads, a lifetime per entry. */
export class AccessCache<V> {
  private readonly entries = new Map<string, Entry<V>>();

  constructor(private readonly owner: { readonly enabled: boolean }) {}

  /**
   * The cached value, or `load()`'s, cached unless `keep` says no; `lifetimeMs` may shorten
   * the entry's life (counted from when the load started).
   */
  get(
    key: string,
    load: () => Promise<V>,
    options: { keep?: (value: V) => boolean; lifetimeMs?: (value: V) => number } = {},
  ): Promise<V> {
    if (!this.owner.enabled) return load();
    const now = performance.now();
    const hit = this.entries.get(key);
    if (hit && hit.until > now) return hit.value;
    const entry: Entry<V> = { until: now + ACCESS_CACHE_TTL_MS, value: load() };
    if (hit) this.entries.delete(key);
    else if (this.entries.size >= MAX_ENTRIES) this.entries.delete(this.entries.keys().next().value!);
    this.entries.set(key, entry);
    entry.value.then(
      (value) => {
        if (this.entries.get(key) !== entry) return; // dropped while loading
        entry.settled = { value };
        if (options.keep && !options.keep(value)) this.entries.delete(key);
        else if (options.lifetimeMs) entry.until = Math.min(entry.until, now + options.lifetimeMs(value));
      },
      () => {
        if (this.entries.get(key) === entry) this.entries.delete(key);
      },
    );
    return entry.value;
  }

  delete(key: string): void {
    this.entries.delete(key);
  }

  /** Drops the entries whose key or value matches, and every entry still loading (its value is not known yet). */
  deleteWhere(match: (key: string, value: V) => boolean): void {
    for (const [key, entry] of this.entries)
      if (!entry.settled || match(key, entry.settled.value)) this.entries.delete(key);
  }

  clear(): void {
    this.entries.clear();
  }
}

/** Key of the apps cache: one application on one connection. */
export const appKey = (alias: string, apiKeyId: string) => `${alias}\n${apiKeyId}`;

/** The access caches of one connector (one database handle); emits `drop` after each change it applies. */
export class AccessCaches extends EventEmitter {
  private listening = false;
  /** Key id → secret hash and record (db/api-keys.ts findForVerification). */
  readonly apiKeys = new AccessCache<ApiKeyVerification | undefined>(this);
  /** Key id → when this process last recorded the key's use (api_keys.last_used_at), ms. */
  readonly lastTouched = new Map<string, number>();
  /** appKey(alias, key id) → the application's access to the connection, null when none. */
  readonly apps = new AccessCache<{ access: AppAccess } | null>(this);
  /** Alias → the connection's route (transfer, state, data address), null for an unknown alias. */
  readonly routes = new AccessCache<GatewayRoute | null>(this);
  /** SHA-256 of a transfer token → its grant (valid tokens only). */
  readonly grants = new AccessCache<CachedGrant | undefined>(this);
  /** Agreement id → what it covers, without the time-dependent actions (gateway/dataplane/coverage.ts). */
  readonly coverage = new AccessCache<CoverageFacts | CoverageRefusal>(this);

  get enabled(): boolean {
    return this.listening;
  }

  /** The process hears of changes made elsewhere (its listening connection is up): cache, from empty. */
  listeningStarted(): void {
    this.clear();
    this.listening = true;
  }

  /** Notices may be lost from now on: read through to the database. */
  listeningStopped(): void {
    this.listening = false;
    this.clear();
  }

  clear(): void {
    for (const c of [this.apiKeys, this.apps, this.routes, this.grants, this.coverage]) c.clear();
  }

  /** What a change takes out of the caches. */
  drop(change: AccessChange): void {
    this.apply(change);
    this.emit('drop', change);
  }

  private apply(change: AccessChange): void {
    switch (change.kind) {
      case 'api_key':
        this.apiKeys.delete(change.id);
        this.apps.deleteWhere((key) => key.endsWith(`\n${change.id}`));
        return;
      case 'connection':
        this.routes.delete(change.alias);
        this.apps.deleteWhere((key) => key.startsWith(`${change.alias}\n`));
        return;
      case 'transfer': {
        // Its agreement's coverage too: ending an agreement revokes the tokens of its transfers.
        const agreements = new Set<string>();
        this.grants.deleteWhere((_, cached) => {
          if (cached?.grant.transferId !== change.id) return false;
          agreements.add(cached.grant.agreementId);
          return true;
        });
        for (const id of agreements) this.coverage.delete(id);
        return;
      }
      case 'agreement':
        this.coverage.delete(change.id);
        this.grants.deleteWhere((_, cached) => cached?.grant.agreementId === change.id);
        return;
      case 'coverage':
        this.coverage.clear();
        return;
      case 'all':
        this.clear();
    }
  }
}

const registry = new WeakMap<object, AccessCaches>();

/** The caches of the connector that uses this (root, not transaction) database handle. */
export function accessCachesOf(db: Knex): AccessCaches {
  let caches = registry.get(db);
  if (!caches) {
    caches = new AccessCaches();
    registry.set(db, caches);
  }
  return caches;
}

/** Sends the notice of a change (inside the writer's transaction when given one: it leaves on commit). */
export async function notifyAccessChange(q: Knex | Knex.Transaction, change: AccessChange): Promise<void> {
  await q.raw('SELECT pg_notify(?, ?)', [ACCESS_CHANNEL, JSON.stringify(change)]);
}

/** Drops the change's entries from this process's caches; call it once the change has committed. */
export function dropCachedAccess(db: Knex, change: AccessChange): void {
  registry.get(db)?.drop(change);
}

/** For a change already committed outside a transaction of ours: drop here, then tell the others. */
export async function accessChanged(db: Knex, change: AccessChange): Promise<void> {
  dropCachedAccess(db, change);
  await notifyAccessChange(db, change);
}

/** A notice from the listening connection; an unreadable one drops everything. */
export function readAccessNotice(payload: string | undefined): AccessChange {
  try {
    const c = JSON.parse(payload ?? '') as Partial<Record<string, unknown>>;
    if ((c.kind === 'api_key' || c.kind === 'transfer' || c.kind === 'agreement') && typeof c.id === 'string')
      return { kind: c.kind, id: c.id };
    if (c.kind === 'connection' && typeof c.alias === 'string') return { kind: 'connection', alias: c.alias };
    if (c.kind === 'coverage') return { kind: 'coverage' };
  } catch {
    // fall through
  }
  return { kind: 'all' };
}

/** Management resources an agreement's coverage is built from (gateway/dataplane/coverage.ts). */
const COVERAGE_RESOURCES = /^\/api\/v1\/(sources|products|offers)(\/|$)/;

/**
 * Management middleware: a successful write to a source, product or offer drops every cached
 * coverage, here and (by the notice) in every other process, before the answer leaves. Such
 * edits are rare; rebuilding every coverage once is cheaper than tracking which agreements
 * each one touches.
 */
export function dropCoverageAfterWrites(db: Knex) {
  return async function coverageChanged(ctx: Context, next: Next) {
    await next();
    if (
      ctx.method !== 'GET' &&
      ctx.method !== 'HEAD' &&
      ctx.status < 300 &&
      COVERAGE_RESOURCES.test(ctx.path)
    )
      await accessChanged(db, { kind: 'coverage' });
  };
}
