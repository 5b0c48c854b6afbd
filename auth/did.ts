/**
 * Our participant DID (did:web) and its DID document, and the did:web ⇄ URL mapping of the
 * W3C CCG did:web method: `did:web:example.com%3A3000:user:alice` is served at
 * `https://example.com:3000/user/alice/did.json`; without a path, at `/.well-known/did.json`.
 */
import type { JWK } from 'jose';

export const DID_CORE_CONTEXT = 'https://www.w3.org/ns/did/v1';
/** The vocabulary of `JsonWebKey2020` verification methods with `publicKeyJwk`. */
export const JWS_2020_CONTEXT = 'https://w3id.org/security/suites/jws-2020/v1';

export interface VerificationMethod {
  id: string;
  type: string;
  controller: string;
  publicKeyJwk?: JWK;
  [other: string]: unknown;
}

/** A verification relationship lists methods by reference (a DID URL, maybe relative) or embeds them. */
export type VerificationReference = string | VerificationMethod;

export interface DidDocument {
  '@context': string | Array<string | Record<string, unknown>>;
  id: string;
  verificationMethod?: VerificationMethod[];
  authentication?: VerificationReference[];
  assertionMethod?: VerificationReference[];
  capabilityInvocation?: VerificationReference[];
  service?: unknown[];
  [other: string]: unknown;
}

/** Why a DID is refused before anything is fetched. */
export class DidSyntaxError extends Error {
  override name = 'DidSyntaxError';
  constructor(
    readonly reason: 'unsupported_did' | 'invalid_did',
    message: string,
  ) {
    super(message);
  }
}

export interface DidWebParts {
  /** Lower-case host name, or an IPv4 address (only ever accepted for loopback in dev). */
  hostname: string;
  /** The port, '' for the scheme's default. */
  port: string;
  /** Path segments as they appear in the URL (percent-encoded). */
  path: string[];
}

const PATH_SEGMENT = /^(?:[A-Za-z0-9._~!$&'()*+,;=@-]|%[0-9A-Fa-f]{2})+$/;
const IPV4 = /^\d{1,3}(?:\.\d{1,3}){3}$/;

export const isIpv4Literal = (hostname: string): boolean => IPV4.test(hostname);

/** `localhost` and 127.0.0.0/8: the only hosts DID_WEB_ALLOW_HTTP opens up. */
export function isLoopbackHost(hostname: string): boolean {
  return hostname === 'localhost' || (IPV4.test(hostname) && hostname.startsWith('127.'));
}

export function parseDidWeb(did: string): DidWebParts {
  if (!did.startsWith('did:web:'))
    throw new DidSyntaxError('unsupported_did', `${did.slice(0, 40)}: only did:web DIDs are supported`);
  const id = did.slice('did:web:'.length);
  if (id.length === 0 || id.length > 2048 || /[/?#\s]/.test(id))
    throw new DidSyntaxError('invalid_did', 'not a did:web DID');
  const [hostPart = '', ...path] = id.split(':');
  // Only the port's colon may be percent-encoded in the host part (did:web §3.2).
  const host = hostPart.replace(/%3A/gi, ':');
  const m = /^([a-z0-9.-]+)(?::(\d{1,5}))?$/i.exec(host);
  if (!m || m[1]!.startsWith('.') || m[1]!.endsWith('.') || m[1]!.includes('..')) {
    throw new DidSyntaxError('invalid_did', `${did}: the host is not a domain name`);
  }
  const port = m[2] ?? '';
  if (port && (Number(port) < 1 || Number(port) > 65535))
    throw new DidSyntaxError('invalid_did', `${did}: bad port`);
  for (const segment of path) {
    // No empty, dot or encoded-slash segments: the path must map to exactly one place.
    if (!PATH_SEGMENT.test(segment) || segment === '.' || segment === '..' || /%2f/i.test(segment)) {
      throw new DidSyntaxError('invalid_did', `${did}: bad path segment`);
    }
  }
  return { hostname: m[1]!.toLowerCase(), port, path };
}

/** Where the DID document of `did` lives on its host: `/.well-known/did.json` or `/<path>/did.json`. */
export function didDocumentPath(did: string): string {
  const { path } = parseDidWeb(did);
  return path.length === 0 ? '/.well-known/did.json' : `/${path.join('/')}/did.json`;
}

export function didDocumentUrl(did: string, scheme: 'https' | 'http'): string {
  const { hostname, port } = parseDidWeb(did);
  return `${scheme}://${hostname}${port ? `:${port}` : ''}${didDocumentPath(did)}`;
}

/** The did:web DID a connector reachable at `publicUrl` has: host, percent-encoded port, path. */
export function didWebFromUrl(publicUrl: string): string {
  const url = new URL(publicUrl);
  if (url.hostname.startsWith('[')) {
    throw new DidSyntaxError(
      'invalid_did',
      `PUBLIC_URL ${publicUrl}: an IPv6 address cannot name a did:web DID; set CONNECTOR_DID`,
    );
  }
  const host = url.port ? `${url.hostname}%3A${url.port}` : url.hostname;
  const path = url.pathname
    .split('/')
    .filter(Boolean)
    .map((s) => s.replace(/:/g, '%3A'));
  const did = ['did:web', host, ...path].join(':');
  parseDidWeb(did);
  return did;
}

export const verificationMethodId = (did: string, kid: string): string => `${did}#${kid}`;

/**
 * Our DID document (W3C DID Core). Every key may sign connector tokens (DCP wants
 * `capabilityInvocation`), presentations (`authentication`) and evidence (`assertionMethod`).
 */
export function buildDidDocument(did: string, keys: Array<{ kid: string; publicJwk: JWK }>): DidDocument {
  const methods = keys.map((k): VerificationMethod => ({
    id: verificationMethodId(did, k.kid),
    type: 'JsonWebKey2020',
    controller: did,
    publicKeyJwk: k.publicJwk,
  }));
  const ids = methods.map((m) => m.id);
  return {
    '@context': [DID_CORE_CONTEXT, JWS_2020_CONTEXT],
    id: did,
    verificationMethod: methods,
    authentication: ids,
    assertionMethod: ids,
    capabilityInvocation: ids,
  };
}

/** A relative DID URL (`#key-1`) names a method of the document's own DID. */
export const absoluteDidUrl = (did: string, ref: string): string =>
  ref.startsWith('#') ? `${did}${ref}` : ref;

/**
 * The verification method `kid` if the document lists it under `relationship`; `undefined` if
 * the document has no such key or does not allow it for that purpose.
 */
export function findVerificationMethod(
  doc: DidDocument,
  kid: string,
  relationship: 'capabilityInvocation' | 'authentication' | 'assertionMethod',
): VerificationMethod | undefined {
  const refs = Array.isArray(doc[relationship]) ? doc[relationship] : [];
  const related = refs.some((r) =>
    typeof r === 'string' ? absoluteDidUrl(doc.id, r) === kid : absoluteDidUrl(doc.id, String(r.id)) === kid,
  );
  if (!related) return undefined;
  const embedded = refs.find(
    (r): r is VerificationMethod => typeof r === 'object' && absoluteDidUrl(doc.id, String(r.id)) === kid,
  );
  const listed = (Array.isArray(doc.verificationMethod) ? doc.verificationMethod : []).find(
    (m) => typeof m === 'object' && m !== null && absoluteDidUrl(doc.id, String(m.id)) === kid,
  );
  return embedded ?? listed;
}
