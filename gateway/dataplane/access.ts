/**
 * Access to the provider data plane for pull transfers (HttpData-PULL): the DataAddress the
 * provider sends in its TransferStartMessage carries an opaque bearer token bound to one
 * transfer and its agreement, an expiry and a refresh endpoint.
 *
 * - Tokens are `dpt_` + 256 random bits (base64url); only their SHA-256 is stored.
 * - The transfer process issues a token on start and resume (idempotent per issue key: a
 *   retried activity gets a working token and the one it replaces stops working) and revokes
 *   them on suspend, complete and terminate.
 * - Renewal (`POST {endpoint}/token` with the current token): the current token stays valid
 *   until the new one is first used, and asking again with the current token replaces a new
 *   token that was never used. A renewal answer lost on the way therefore never breaks a
 *   transfer (the retire-on-acknowledgement rule of Tractus-X, research/gateway.md §6.2).
 */
import { peerAddressProblem, peerDispatcher } from '../../auth/peer-addresses.js';
import { hash, randomBytes, randomUUID } from 'node:crypto';
import type { Knex } from 'knex';
import { request } from 'undici';
import { dataplaneTokenStore, type TokenRow } from '../../db/dataplane.js';
import {
  accessCachesOf,
  accessChanged,
  dropCachedAccess,
  notifyAccessChange,
  type AccessChange,
} from '../access-cache.js';
import { MASK } from '../../domain/masking.js';
import { isRfc3339, toRfc3339 } from '../../domain/time.js';

export const HTTP_ENDPOINT_TYPE = 'https://w3id.org/idsa/v4.1/HTTP';

export interface EndpointProperty {
  '@type': 'EndpointProperty';
  name: string;
  value: string;
}

export interface DataAddress {
  '@type': 'DataAddress';
  endpointType: typeof HTTP_ENDPOINT_TYPE;
  endpoint: string;
  /** authorization (the token), authType ("bearer"), expiresAt (RFC 3339), refreshEndpoint (URL). */
  endpointProperties: EndpointProperty[];
}

/** Ten minutes: short enough that a leaked token is worth little, long enough to renew calmly. */
export const DEFAULT_TOKEN_TTL_SECONDS = 600;
export const TOKEN_PATTERN = /^dpt_[A-Za-z0-9_-]{43}$/;
/** Path of the renewal endpoint below the data plane base (`{publicUrl}/dataplane/v1`). */
export const REFRESH_PATH = '/token';

export const hashToken = (token: string): string => hash('sha256', token, 'hex');

/** How evidence names a pull token: its SHA-256, as the data plane stores it. */
export const tokenDigest = (token: string) => `sha256:${hashToken(token)}`;
const newToken = (): string => `dpt_${randomBytes(32).toString('base64url')}`;

function dataAddressOf(row: TokenRow, token: string): DataAddress {
  return {
    '@type': 'DataAddress',
    endpointType: HTTP_ENDPOINT_TYPE,
    endpoint: row.endpoint,
    endpointProperties: [
      { '@type': 'EndpointProperty', name: 'authorization', value: token },
      { '@type': 'EndpointProperty', name: 'authType', value: 'bearer' },
      { '@type': 'EndpointProperty', name: 'expiresAt', value: toRfc3339(row.expires_at) },
      { '@type': 'EndpointProperty', name: 'refreshEndpoint', value: `${row.endpoint}${REFRESH_PATH}` },
    ],
  };
}

export function endpointProperty(address: DataAddress, name: string): string | undefined {
  return address.endpointProperties.find((p) => p.name === name)?.value;
}

/**
 * Issues the token of a transfer (on start and on resume). Every other token of the transfer
 * stops working; a retry with the same issue key replaces the token it issued before.
 */
export async function issueTransferAccess(
  db: Knex,
  input: {
    transferId: string;
    agreementId: string;
    consumerDid: string;
    /** Our public data plane base, `${publicUrl}/dataplane/v1`. */
    endpoint: string;
    issueKey: string;
    ttlSeconds?: number;
  },
): Promise<DataAddress> {
  const token = newToken();
  const changed = transferChange(input.transferId);
  const row = await db.transaction(async (trx) => {
    const store = dataplaneTokenStore(trx);
    await store.lockTransfer(input.transferId);
    await store.revokeTransfer(input.transferId);
    await notifyAccessChange(trx, changed);
    return store.insert({
      id: `dpt-${randomUUID()}`,
      transfer_id: input.transferId,
      agreement_id: input.agreementId,
      consumer_did: input.consumerDid,
      token_hash: hashToken(token),
      issue_key: input.issueKey,
      predecessor_id: null,
      endpoint: input.endpoint.replace(/\/+$/, ''),
      ttl_seconds: input.ttlSeconds ?? DEFAULT_TOKEN_TTL_SECONDS,
    });
  });
  dropCachedAccess(db, changed);
  return dataAddressOf(row, token);
}

/**
 * Every token of the transfer stops working at once, for the very next request in this
 * process and, by the notice sent on commit, in every other (gateway/access-cache.ts);
 * revoking twice is harmless.
 */
export async function revokeTransferAccess(db: Knex, transferId: string): Promise<void> {
  const changed = transferChange(transferId);
  await db.transaction(async (trx) => {
    const store = dataplaneTokenStore(trx);
    await store.lockTransfer(transferId);
    await store.revokeTransfer(transferId);
    await notifyAccessChange(trx, changed);
  });
  dropCachedAccess(db, changed);
}

const transferChange = (transferId: string): AccessChange => ({ kind: 'transfer', id: transferId });

/** The data address with its token masked, for management reads. */
export function maskDataAddress(a: DataAddress | null): DataAddress | null {
  if (a === null) return null;
  return {
    ...a,
    endpointProperties: a.endpointProperties.map((p) =>
      p.name === 'authorization' ? { ...p, value: MASK } : p,
    ),
  };
}

/** What a valid token grants: one transfer under one agreement, for one consumer. */
export interface TransferGrant {
  tokenId: string;
  transferId: string;
  agreementId: string;
  consumerDid: string;
  expiresAt: string;
}

const grantOf = (row: TokenRow): TransferGrant => ({
  tokenId: row.id,
  transferId: row.transfer_id,
  agreementId: row.agreement_id,
  consumerDid: row.consumer_did,
  expiresAt: toRfc3339(row.expires_at),
});

/**
 * Checks a presented token (data plane side). Undefined when it is malformed, unknown,
 * revoked or expired: the caller cannot tell which, and needs not. The first use of a
 * renewed token retires the token it replaced.
 */
export async function verifyTransferToken(db: Knex, token: string): Promise<TransferGrant | undefined> {
  if (!TOKEN_PATTERN.test(token)) return undefined;
  return (await findGrant(db, hashToken(token)))?.grant;
}

async function findGrant(
  db: Knex,
  tokenHash: string,
): Promise<{ grant: TransferGrant; remainingMs: number } | undefined> {
  const store = dataplaneTokenStore(db);
  const row = await store.findUsable(tokenHash);
  if (!row) return undefined;
  if (row.used_at === null) {
    await store.markUsed(row);
    // Its predecessor has just retired: no process may go on accepting it.
    if (row.predecessor_id !== null) await accessChanged(db, transferChange(row.transfer_id));
  }
  return { grant: grantOf(row), remainingMs: row.remaining_ms };
}

/**
 * verifyTransferToken for the data plane's hot path: a valid token's grant is cached (by the
 * token's hash) for a second at most and never past the token's expiry; every revocation
 * drops it at once (gateway/access-cache.ts).
 */
export async function checkTransferToken(db: Knex, token: string): Promise<TransferGrant | undefined> {
  if (!TOKEN_PATTERN.test(token)) return undefined;
  const hash = hashToken(token);
  const found = await accessCachesOf(db).grants.get(hash, () => findGrant(db, hash), {
    keep: (g) => g !== undefined,
    lifetimeMs: (g) => g!.remainingMs,
  });
  return found?.grant;
}

/**
 * Renews a token (server side of `POST {endpoint}/token`): a new token with the same lifetime.
 * The presented token is acknowledged (its own predecessor retires), stays valid until the new
 * token is used, and any earlier renewal from it that was never used is replaced. Undefined
 * when the presented token is not valid.
 */
export async function renewTransferAccess(
  db: Knex,
  token: string,
): Promise<{ grant: TransferGrant; address: DataAddress } | undefined> {
  if (!TOKEN_PATTERN.test(token)) return undefined;
  const hash = hashToken(token);
  const fresh = newToken();
  let changed: string | undefined;
  const renewed = await db.transaction(async (trx) => {
    const store = dataplaneTokenStore(trx);
    const found = await store.findByHash(hash);
    if (!found) return undefined;
    await store.lockTransfer(found.transfer_id);
    // Read again under the lock: a revoke or another renewal may have just finished.
    const current = await store.findUsable(hash, { forUpdate: true });
    if (!current) return undefined;
    await store.markUsed(current);
    await store.revokeUnusedSuccessors(current.id);
    await notifyAccessChange(trx, transferChange(current.transfer_id));
    changed = current.transfer_id;
    const row = await store.insert({
      id: `dpt-${randomUUID()}`,
      transfer_id: current.transfer_id,
      agreement_id: current.agreement_id,
      consumer_did: current.consumer_did,
      token_hash: hashToken(fresh),
      issue_key: null,
      predecessor_id: current.id,
      endpoint: current.endpoint,
      ttl_seconds: current.ttl_seconds,
    });
    return { grant: grantOf(row), address: dataAddressOf(row, fresh) };
  });
  if (changed) dropCachedAccess(db, transferChange(changed));
  return renewed;
}

/** A renewal that did not succeed; `retryable` is false when the provider refused the token. */
export class TokenRefreshError extends Error {
  constructor(
    message: string,
    readonly status: number | null,
    readonly retryable: boolean,
  ) {
    super(message);
    this.name = 'TokenRefreshError';
  }
}

const REFRESH_TIMEOUTS = { connect: 3_000, headers: 5_000, total: 10_000 };
const MAX_REFRESH_ANSWER = 64 * 1024;
const refreshOptions = {
  connect: { timeout: REFRESH_TIMEOUTS.connect },
  headersTimeout: REFRESH_TIMEOUTS.headers,
  bodyTimeout: REFRESH_TIMEOUTS.total,
};
// The refresh endpoint comes from the provider: never into our own network (auth/peer-addresses.ts).
const refreshDispatchers = {
  publicOnly: peerDispatcher(false, refreshOptions),
  loopbackAllowed: peerDispatcher(true, refreshOptions),
};

/** Whether a value has the DataAddress shape with a bearer token, expiry and refresh endpoint. */
export function isPullDataAddress(value: unknown): value is DataAddress {
  const a = value as Partial<DataAddress> | null;
  if (!a || typeof a !== 'object' || a['@type'] !== 'DataAddress') return false;
  if (a.endpointType !== HTTP_ENDPOINT_TYPE || typeof a.endpoint !== 'string') return false;
  if (!/^https?:\/\//.test(a.endpoint) || !Array.isArray(a.endpointProperties)) return false;
  const props = new Map<string, string>();
  for (const p of a.endpointProperties as unknown[]) {
    const e = p as Partial<EndpointProperty> | null;
    if (!e || typeof e.name !== 'string' || typeof e.value !== 'string') return false;
    props.set(e.name, e.value);
  }
  return (
    (props.get('authorization') ?? '') !== '' &&
    props.get('authType')?.toLowerCase() === 'bearer' &&
    isRfc3339(props.get('expiresAt') ?? '') &&
    /^https?:\/\//.test(props.get('refreshEndpoint') ?? '')
  );
}

/**
 * Consumer side: renews the token of a data address at its refresh endpoint and returns the
 * new address. Network errors, timeouts and 5xx answers are retryable (the old token still
 * works, so the caller just asks again); a refused token (4xx) is not.
 */
export async function refreshTransferToken(
  dataAddress: DataAddress,
  opts: { signal?: AbortSignal; allowLoopback?: boolean } = {},
): Promise<DataAddress> {
  const url = endpointProperty(dataAddress, 'refreshEndpoint');
  const token = endpointProperty(dataAddress, 'authorization');
  if (!url || !token)
    throw new TokenRefreshError('the data address has no refresh endpoint or token', null, false);
  const problem = peerAddressProblem(url, opts.allowLoopback ?? false);
  if (problem) throw new TokenRefreshError(`the refresh endpoint cannot be called: ${problem}`, null, false);
  const timeout = AbortSignal.timeout(REFRESH_TIMEOUTS.total);
  let status: number | null = null;
  let text: string;
  try {
    const res = await request(url, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, accept: 'application/json' },
      dispatcher: opts.allowLoopback ? refreshDispatchers.loopbackAllowed : refreshDispatchers.publicOnly,
      signal: opts.signal ? AbortSignal.any([opts.signal, timeout]) : timeout,
    });
    status = res.statusCode;
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const chunk of res.body as AsyncIterable<Buffer>) {
      size += chunk.length;
      if (size > MAX_REFRESH_ANSWER)
        throw new TokenRefreshError(`${url}: the answer is too large`, status, true);
      chunks.push(chunk);
    }
    text = Buffer.concat(chunks).toString('utf8');
  } catch (err) {
    if (err instanceof TokenRefreshError) throw err;
    throw new TokenRefreshError(`${url} could not be reached: ${(err as Error).message}`, status, true);
  }
  if (status !== 200) {
    const retryable = status >= 500 || status === 429 || status === 408;
    throw new TokenRefreshError(`${url} refused the renewal (${status})`, status, retryable);
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw new TokenRefreshError(`${url} did not answer JSON`, status, true);
  }
  if (!isPullDataAddress(parsed))
    throw new TokenRefreshError(`${url} answered no valid data address`, status, true);
  return parsed;
}
