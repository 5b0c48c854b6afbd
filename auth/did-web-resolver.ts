/**
 * A hardened did:web resolver (security.md §2.3): HTTPS only (http for loopback DIDs when
 * DID_WEB_ALLOW_HTTP is on, for local demos and tests), no IP literals, no redirects, a bounded
 * time and size, a JSON content type, `id` equal to the DID, and a connect-time address check so
 * that a DID cannot point us at our own network (loopback, private, link-local, metadata), even
 * through DNS rebinding. Documents are cached briefly; a caller may ask for a fresh copy once
 * in a while (a key it does not find may have just been added).
 */
import dns from 'node:dns';
import net from 'node:net';
import { Agent, request, type Dispatcher } from 'undici';
import {
  DidSyntaxError,
  didDocumentUrl,
  isIpv4Literal,
  isLoopbackHost,
  parseDidWeb,
  type DidDocument,
} from './did.js';

export type DidResolutionReason =
  | 'unsupported_did'
  | 'invalid_did'
  | 'did_not_allowed'
  | 'did_unreachable'
  | 'did_timeout'
  | 'did_document_too_large'
  | 'did_document_invalid';

export class DidResolutionError extends Error {
  override name = 'DidResolutionError';
  constructor(
    readonly reason: DidResolutionReason,
    message: string,
  ) {
    super(message);
  }
}

export interface DidResolverOptions {
  /** DID_WEB_ALLOW_HTTP: loopback DIDs (`localhost`, 127.0.0.0/8, with a port) resolve over http. */
  allowHttpLoopback?: boolean;
  /** Whole request, connect to last byte. */
  timeoutMs?: number;
  maxBytes?: number;
  cacheTtlMs?: number;
  /** A fresh copy is fetched at most this often per DID, however often callers ask. */
  minRefreshMs?: number;
  /** Lets non-loopback DIDs resolve to private addresses (a closed network of connectors). */
  allowPrivateAddresses?: boolean;
}

export interface DidResolver {
  resolve(did: string, options?: { fresh?: boolean }): Promise<DidDocument>;
}

const DEFAULTS = {
  timeoutMs: 3_000,
  maxBytes: 64 * 1024,
  cacheTtlMs: 5 * 60_000,
  minRefreshMs: 30_000,
};
const MAX_CACHED = 1_000;

/** Addresses a DID on the open internet must not lead to. */
function nonPublicAddresses(): net.BlockList {
  const list = new net.BlockList();
  for (const [prefix, bits] of [
    ['0.0.0.0', 8],
    ['10.0.0.0', 8],
    ['100.64.0.0', 10],
    ['127.0.0.0', 8],
    ['169.254.0.0', 16],
    ['172.16.0.0', 12],
    ['192.0.0.0', 24],
    ['192.168.0.0', 16],
    ['198.18.0.0', 15],
    ['224.0.0.0', 3],
  ] as const)
    list.addSubnet(prefix, bits, 'ipv4');
  for (const [prefix, bits] of [
    ['::', 128],
    ['::1', 128],
    ['fc00::', 7],
    ['fe80::', 10],
    ['ff00::', 8],
  ] as const)
    list.addSubnet(prefix, bits, 'ipv6');
  return list;
}
const NON_PUBLIC = nonPublicAddresses();
const LOOPBACK = new net.BlockList();
LOOPBACK.addSubnet('127.0.0.0', 8, 'ipv4');
LOOPBACK.addAddress('::1', 'ipv6');

const familyOf = (address: string): 'ipv4' | 'ipv6' => (net.isIPv6(address) ? 'ipv6' : 'ipv4');

/** Whether an IP address is loopback, private, link-local, shared, multicast or otherwise not public. */
export const isNonPublicAddress = (address: string): boolean => NON_PUBLIC.check(address, familyOf(address));

/**
 * A `lookup` for the socket: resolves as usual, then refuses addresses the host must not have.
 * Checking here, where the socket connects, is what defeats DNS rebinding.
 */
export function guardedLookup(options: {
  allowHttpLoopback: boolean;
  allowPrivateAddresses: boolean;
}): net.LookupFunction {
  return function lookupPublicOnly(hostname, lookupOptions, callback) {
    dns.lookup(hostname, { ...lookupOptions, all: true }, (err, addresses) => {
      if (err) return callback(err, '', 0);
      const loopbackDid = options.allowHttpLoopback && isLoopbackHost(hostname);
      const refused = addresses.find((a) =>
        loopbackDid
          ? !LOOPBACK.check(a.address, familyOf(a.address))
          : !options.allowPrivateAddresses && NON_PUBLIC.check(a.address, familyOf(a.address)),
      );
      if (refused || addresses.length === 0) {
        const error = Object.assign(
          new Error(`${hostname} resolves to ${refused?.address ?? 'nothing'}, which a DID may not point to`),
          { code: 'EDIDADDRESS' },
        );
        return callback(error, '', 0);
      }
      if (lookupOptions.all) return callback(null, addresses);
      const first = addresses[0]!;
      callback(null, first.address, first.family);
    });
  };
}

/** The URL of the document, or why the DID is refused before any request. */
function documentUrl(did: string, allowHttpLoopback: boolean): string {
  let parts;
  try {
    parts = parseDidWeb(did);
  } catch (err) {
    if (err instanceof DidSyntaxError) throw new DidResolutionError(err.reason, err.message);
    throw err;
  }
  if (isLoopbackHost(parts.hostname)) {
    if (!allowHttpLoopback) {
      throw new DidResolutionError(
        'did_not_allowed',
        `${did}: loopback DIDs are refused (DID_WEB_ALLOW_HTTP is off)`,
      );
    }
    return didDocumentUrl(did, 'http');
  }
  if (isIpv4Literal(parts.hostname)) {
    throw new DidResolutionError(
      'did_not_allowed',
      `${did}: a did:web host must be a domain name, not an IP address`,
    );
  }
  return didDocumentUrl(did, 'https');
}

async function readCapped(body: AsyncIterable<Buffer>, maxBytes: number, did: string): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    size += chunk.length;
    if (size > maxBytes)
      throw new DidResolutionError(
        'did_document_too_large',
        `${did}: the DID document is larger than ${maxBytes} bytes`,
      );
    chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}

function describeFailure(err: unknown, did: string, timeoutMs: number): DidResolutionError {
  if (err instanceof DidResolutionError) return err;
  const e = err as {
    code?: string;
    name?: string;
    message?: string;
    cause?: { code?: string; message?: string };
  };
  const code = e.code ?? e.cause?.code;
  if (
    e.name === 'TimeoutError' ||
    e.name === 'AbortError' ||
    (code && /TIMEOUT|UND_ERR_ABORTED/.test(code))
  ) {
    return new DidResolutionError(
      'did_timeout',
      `${did}: the DID document did not arrive within ${timeoutMs} ms`,
    );
  }
  if (code === 'EDIDADDRESS')
    return new DidResolutionError('did_not_allowed', e.message ?? e.cause?.message ?? 'address refused');
  return new DidResolutionError(
    'did_unreachable',
    `${did}: the DID document could not be fetched (${code ?? e.message ?? 'error'})`,
  );
}

function checkDocument(parsed: unknown, did: string): DidDocument {
  const doc = parsed as DidDocument | null;
  if (doc === null || typeof doc !== 'object' || Array.isArray(doc)) {
    throw new DidResolutionError('did_document_invalid', `${did}: the DID document is not a JSON object`);
  }
  // DCP step 4: the document must be the DID's own, not one copied from elsewhere.
  if (doc.id !== did)
    throw new DidResolutionError('did_document_invalid', `${did}: the DID document is for ${String(doc.id)}`);
  if (doc.verificationMethod !== undefined && !Array.isArray(doc.verificationMethod)) {
    throw new DidResolutionError('did_document_invalid', `${did}: verificationMethod is not a list`);
  }
  return doc;
}

export function didWebResolver(options: DidResolverOptions = {}, dispatcher?: Dispatcher): DidResolver {
  const allowHttpLoopback = options.allowHttpLoopback ?? false;
  const timeoutMs = options.timeoutMs ?? DEFAULTS.timeoutMs;
  const maxBytes = options.maxBytes ?? DEFAULTS.maxBytes;
  const cacheTtlMs = options.cacheTtlMs ?? DEFAULTS.cacheTtlMs;
  const minRefreshMs = options.minRefreshMs ?? DEFAULTS.minRefreshMs;
  const agent =
    dispatcher ??
    new Agent({
      connect: {
        timeout: timeoutMs,
        lookup: guardedLookup({
          allowHttpLoopback,
          allowPrivateAddresses: options.allowPrivateAddresses ?? false,
        }),
      },
      headersTimeout: timeoutMs,
      bodyTimeout: timeoutMs,
    });
  const cache = new Map<string, { doc: DidDocument; fetchedAt: number }>();
  const inFlight = new Map<string, Promise<DidDocument>>();

  async function fetchDocument(did: string): Promise<DidDocument> {
    const url = documentUrl(did, allowHttpLoopback);
    try {
      const res = await request(url, {
        method: 'GET',
        headers: { accept: 'application/did+json, application/json' },
        dispatcher: agent,
        signal: AbortSignal.timeout(timeoutMs),
      });
      if (res.statusCode !== 200) {
        await res.body.dump().catch(() => undefined);
        const why =
          res.statusCode >= 300 && res.statusCode < 400 ? 'redirects are not followed' : 'not found there';
        throw new DidResolutionError('did_unreachable', `${did}: ${url} answered ${res.statusCode} (${why})`);
      }
      const type = String(res.headers['content-type'] ?? '');
      if (!/^application\/([\w.-]+\+)?json\b/i.test(type)) {
        await res.body.dump().catch(() => undefined);
        throw new DidResolutionError(
          'did_document_invalid',
          `${did}: the DID document is not JSON (${type || 'no type'})`,
        );
      }
      if (Number(res.headers['content-length'] ?? 0) > maxBytes) {
        res.body.destroy();
        throw new DidResolutionError(
          'did_document_too_large',
          `${did}: the DID document is larger than ${maxBytes} bytes`,
        );
      }
      const text = (await readCapped(res.body, maxBytes, did)).toString('utf8');
      try {
        return checkDocument(JSON.parse(text), did);
      } catch (err) {
        if (err instanceof SyntaxError)
          throw new DidResolutionError('did_document_invalid', `${did}: the DID document is not valid JSON`);
        throw err;
      }
    } catch (err) {
      throw describeFailure(err, did, timeoutMs);
    }
  }

  function remember(did: string, doc: DidDocument) {
    if (cache.size >= MAX_CACHED) cache.delete(cache.keys().next().value!);
    cache.delete(did);
    cache.set(did, { doc, fetchedAt: Date.now() });
  }

  return {
    async resolve(did, { fresh = false } = {}) {
      const cached = cache.get(did);
      const age = cached ? Date.now() - cached.fetchedAt : Infinity;
      if (cached && age < cacheTtlMs && !(fresh && age >= minRefreshMs)) return cached.doc;
      // Concurrent calls for one DID share one request.
      let pending = inFlight.get(did);
      if (!pending) {
        pending = fetchDocument(did).finally(() => inFlight.delete(did));
        inFlight.set(did, pending);
      }
      const doc = await pending;
      remember(did, doc);
      return doc;
    },
  };
}
