/**
 * Self-issued connector tokens (DCP 1.0 "Self-Issued ID Token", security.md §2.1–2.2): what we
 * send to another connector, and how we check what another connector sends us.
 */
import { randomBytes } from 'node:crypto';
import {
  SignJWT,
  decodeJwt,
  decodeProtectedHeader,
  errors,
  importJWK,
  jwtVerify,
  type CryptoKey,
  type JWK,
  type JWTPayload,
  type ProtectedHeaderParameters,
} from 'jose';
import type { SeenJtiStore } from '../db/seen-jtis.js';
import { findVerificationMethod, verificationMethodId } from './did.js';
import { DidResolutionError, type DidResolutionReason, type DidResolver } from './did-web-resolver.js';
import type { ConnectorKey } from './keys.js';

/** Our tokens live 5 minutes: enough for one call and its retries, short if one leaks. */
export const TOKEN_LIFETIME_SEC = 300;
/** Clock differences we tolerate between connectors (EDC uses 5 s too). */
export const CLOCK_SKEW_SEC = 5;
/** Longer-lived tokens are refused: replay protection keeps every jti until the token expires. */
export const MAX_TOKEN_LIFETIME_SEC = 600;
const MAX_TOKEN_CHARS = 8_192;
const MAX_JTI_CHARS = 256;
/** Asymmetric only: never `none`, never HMAC (a public key must not become a shared secret). */
export const TOKEN_ALGORITHMS = ['ES256', 'ES384', 'EdDSA', 'Ed25519'];

export type ConnectorTokenReason =
  | DidResolutionReason
  | 'malformed_token'
  | 'unsupported_alg'
  | 'bad_kid'
  | 'unknown_key'
  | 'bad_signature'
  | 'wrong_audience'
  | 'issuer_subject_mismatch'
  | 'missing_claim'
  | 'expired'
  | 'not_yet_valid'
  | 'bad_issued_at'
  | 'lifetime_too_long'
  | 'replayed';

/** A refused token, with a stable reason for the caller and a message for people. */
export class ConnectorTokenError extends Error {
  override name = 'ConnectorTokenError';
  constructor(
    readonly reason: ConnectorTokenReason,
    message: string,
  ) {
    super(message);
  }
}

function refuse(reason: ConnectorTokenReason, message: string): never {
  throw new ConnectorTokenError(reason, message);
}

// ---- outbound ---------------------------------------------------------------------------------

export type IssueConnectorToken = (options: { audienceDid: string }) => Promise<string>;

/** Signs tokens for calls to `audienceDid`: iss = sub = our DID, a fresh jti, 5 minutes. */
export function connectorTokenIssuer(identity: { did: string; key: ConnectorKey }): IssueConnectorToken {
  return async function issueConnectorToken({ audienceDid }) {
    return new SignJWT({})
      .setProtectedHeader({
        alg: identity.key.alg,
        typ: 'JWT',
        kid: verificationMethodId(identity.did, identity.key.kid),
      })
      .setIssuer(identity.did)
      .setSubject(identity.did)
      .setAudience(audienceDid)
      .setJti(randomBytes(16).toString('base64url'))
      .setIssuedAt()
      .setExpirationTime(`${TOKEN_LIFETIME_SEC}s`)
      .sign(identity.key.privateKey);
  };
}

// ---- inbound ----------------------------------------------------------------------------------

export type VerifyConnectorToken = (token: string, options: { ourDid: string }) => Promise<{ did: string }>;

export interface ConnectorTokenVerifierDeps {
  resolver: DidResolver;
  jtis: SeenJtiStore;
  clockSkewSec?: number;
  maxLifetimeSec?: number;
}

/** Header and claims read before anything is trusted: they only decide which key to fetch. */
function readUnverified(token: string): { header: ProtectedHeaderParameters; claims: JWTPayload } {
  if (token.length > MAX_TOKEN_CHARS)
    refuse('malformed_token', `the token is longer than ${MAX_TOKEN_CHARS} characters`);
  if (!/^[\w-]+\.[\w-]+\.[\w-]+$/.test(token)) refuse('malformed_token', 'the token is not a compact JWS');
  try {
    return { header: decodeProtectedHeader(token), claims: decodeJwt(token) };
  } catch {
    refuse('malformed_token', 'the token header or claims cannot be decoded');
  }
}

/** security.md §2.2 step 1: an allowed algorithm, a `kid` that is a DID URL of the issuer. */
function checkHeader(
  header: ProtectedHeaderParameters,
  claims: JWTPayload,
): { alg: string; kid: string; iss: string } {
  const alg = header.alg;
  if (typeof alg !== 'string' || !TOKEN_ALGORITHMS.includes(alg)) {
    refuse(
      'unsupported_alg',
      `the algorithm ${String(alg)} is not accepted (${TOKEN_ALGORITHMS.join(', ')})`,
    );
  }
  const iss = claims.iss;
  if (typeof iss !== 'string' || iss === '') refuse('missing_claim', 'the token has no iss');
  const kid = header.kid;
  if (typeof kid !== 'string') refuse('bad_kid', 'the token header has no kid');
  const hash = kid.indexOf('#');
  if (hash <= 0 || hash === kid.length - 1 || kid.slice(0, hash) !== iss) {
    refuse('bad_kid', `the kid must be a DID URL of the issuer (${iss}#…)`);
  }
  return { alg, kid, iss };
}

function publicKeyOf(jwk: unknown, kid: string, alg: string): JWK {
  const key = jwk as JWK | undefined;
  if (!key || typeof key !== 'object') refuse('unknown_key', `${kid} has no publicKeyJwk`);
  // A private or symmetric key in a DID document is a broken document, not a key to trust.
  if ('d' in key || key.kty === 'oct') refuse('unknown_key', `${kid} is not a public key`);
  if (key.alg !== undefined && key.alg !== alg)
    refuse('unknown_key', `${kid} is a key for ${key.alg}, not ${alg}`);
  return key;
}

function fromJoseError(err: unknown): ConnectorTokenError {
  if (err instanceof errors.JWTExpired) return new ConnectorTokenError('expired', 'the token has expired');
  if (err instanceof errors.JWTClaimValidationFailed) {
    if (err.reason === 'missing')
      return new ConnectorTokenError('missing_claim', `the token has no ${err.claim}`);
    switch (err.claim) {
      case 'aud':
        return new ConnectorTokenError('wrong_audience', 'the token is for another connector (aud)');
      case 'sub':
      case 'iss':
        return new ConnectorTokenError('issuer_subject_mismatch', 'iss and sub of the token differ');
      case 'nbf':
        return new ConnectorTokenError('not_yet_valid', 'the token is not valid yet (nbf)');
      case 'iat':
        return new ConnectorTokenError(
          'bad_issued_at',
          'the token was issued in the future or too long ago (iat)',
        );
      default:
        return new ConnectorTokenError('malformed_token', `the ${err.claim} claim is not valid`);
    }
  }
  if (err instanceof errors.JWSSignatureVerificationFailed)
    return new ConnectorTokenError('bad_signature', 'the signature does not verify');
  if (err instanceof errors.JOSEAlgNotAllowed || err instanceof errors.JOSENotSupported) {
    return new ConnectorTokenError('unsupported_alg', 'the algorithm does not fit the key');
  }
  if (err instanceof errors.JOSEError)
    return new ConnectorTokenError('malformed_token', `the token is not valid (${err.code})`);
  throw err;
}

export function connectorTokenVerifier(deps: ConnectorTokenVerifierDeps): VerifyConnectorToken {
  const skew = deps.clockSkewSec ?? CLOCK_SKEW_SEC;
  const maxLifetime = deps.maxLifetimeSec ?? MAX_TOKEN_LIFETIME_SEC;

  async function resolveOrRefuse(did: string, fresh: boolean) {
    try {
      return await deps.resolver.resolve(did, { fresh });
    } catch (err) {
      if (err instanceof DidResolutionError) throw new ConnectorTokenError(err.reason, err.message);
      throw err;
    }
  }

  /** security.md §2.2 steps 2–3; a kid we do not know yet may be a new key: look once more. */
  async function keyFor(iss: string, kid: string, alg: string): Promise<CryptoKey> {
    let method = findVerificationMethod(await resolveOrRefuse(iss, false), kid, 'capabilityInvocation');
    method ??= findVerificationMethod(await resolveOrRefuse(iss, true), kid, 'capabilityInvocation');
    if (!method) refuse('unknown_key', `${iss} lists no key ${kid} for capabilityInvocation`);
    if (method.controller !== iss) refuse('unknown_key', `${kid} is controlled by another DID`);
    try {
      return (await importJWK(publicKeyOf(method.publicKeyJwk, kid, alg), alg)) as CryptoKey;
    } catch (err) {
      if (err instanceof ConnectorTokenError) throw err;
      refuse('unknown_key', `${kid} cannot be used with ${alg}`);
    }
  }

  return async function verifyConnectorToken(token, { ourDid }) {
    const { header, claims } = readUnverified(token);
    const { alg, kid, iss } = checkHeader(header, claims);
    const key = await keyFor(iss, kid, alg);
    let payload: JWTPayload;
    try {
      ({ payload } = await jwtVerify(token, key, {
        algorithms: [alg],
        audience: ourDid,
        issuer: iss,
        subject: iss,
        clockTolerance: skew,
        maxTokenAge: maxLifetime,
        requiredClaims: ['iss', 'sub', 'aud', 'exp', 'iat', 'jti'],
      }));
    } catch (err) {
      throw fromJoseError(err);
    }
    // EDC SubJwkIsNullRule: a self-issued key inside the token would bypass the DID document.
    if ('sub_jwk' in payload) refuse('malformed_token', 'the token carries sub_jwk');
    const exp = payload.exp!;
    if (exp - payload.iat! > maxLifetime)
      refuse('lifetime_too_long', `the token lives longer than ${maxLifetime} s`);
    const jti = payload.jti;
    if (typeof jti !== 'string' || jti.length === 0 || jti.length > MAX_JTI_CHARS)
      refuse('malformed_token', 'the jti is not valid');
    // Last, so that a token failing any other check cannot use up a legitimate jti.
    if (!(await deps.jtis.remember(iss, jti, new Date((exp + skew) * 1000)))) {
      refuse('replayed', 'the token was used before (jti)');
    }
    return { did: iss };
  };
}
