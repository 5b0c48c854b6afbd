/**
 * Signed data plane answers, for agreements whose contract policy has `pl:signedRequests eq
 * true` (docs/gateway.md, "Signed answers").
 *
 * The provider's data plane puts a detached JWS (RFC 7515 Appendix F) over the exact bytes of
 * its answer body in the `PL-Evidence` header, with the unencoded payload option (RFC 7797,
 * `b64: false`), so the signing input is the protected header and the body bytes as sent:
 *
 *   PL-Evidence: <base64url(protected header)>..<base64url(signature)>
 *
 * The protected header binds the body to the request it answers, so an answer cannot be
 * replayed for another request or status:
 *
 *   alg   ES256 (the key's algorithm)         kid  a DID URL of the provider's DID (assertionMethod)
 *   typ   pl-dataplane-answer+jws             b64  false, crit ["b64"]
 *   iat   seconds since the epoch             agr  the agreement id
 *   nonce the gateway's PL-Nonce              htm  the request method
 *   htu   the request target below the data plane endpoint (`buildings/…/points?…`, as sent)
 *   sts   the HTTP status of the answer
 */
import { FlattenedSign, decodeProtectedHeader, errors, flattenedVerify, importJWK } from 'jose';
import type { ConnectorKey } from '../auth/keys.js';
import { findVerificationMethod, verificationMethodId } from '../auth/did.js';
import { DidResolutionError, type DidResolver } from '../auth/did-web-resolver.js';
import { CLOCK_SKEW_SEC, TOKEN_ALGORITHMS } from '../auth/connector-tokens.js';

export const SIGNATURE_HEADER = 'PL-Evidence';
export const NONCE_HEADER = 'PL-Nonce';
export const ANSWER_JWS_TYPE = 'pl-dataplane-answer+jws';
/** How far an answer's `iat` may be from our clock. */
const MAX_AGE_SEC = 300;
const MAX_HEADER_CHARS = 4_096;

/** What the signature binds the body to. */
export interface AnsweredRequest {
  agreementId: string;
  nonce: string;
  method: string;
  /** Below the data plane endpoint, with the query, e.g. `buildings/x/points?class=brick:Meter`. */
  target: string;
  status: number;
}

export type SignAnswer = (body: Uint8Array, request: AnsweredRequest) => Promise<string>;

/** The data plane's signer: our newest key, named by its DID URL in our DID document. */
export function answerSigner(identity: { did: string; key: ConnectorKey }): SignAnswer {
  const kid = verificationMethodId(identity.did, identity.key.kid);
  return async function signAnswer(body, request) {
    const jws = await new FlattenedSign(body)
      .setProtectedHeader({
        alg: identity.key.alg,
        typ: ANSWER_JWS_TYPE,
        kid,
        b64: false,
        crit: ['b64'],
        iat: Math.floor(Date.now() / 1000),
        agr: request.agreementId,
        nonce: request.nonce,
        htm: request.method,
        htu: request.target,
        sts: request.status,
      })
      .sign(identity.key.privateKey);
    return `${jws.protected}..${jws.signature}`;
  };
}

export class AnswerSignatureError extends Error {
  override name = 'AnswerSignatureError';
}

const refuse = (message: string): never => {
  throw new AnswerSignatureError(message);
};

/**
 * Checks an answer's `PL-Evidence` against the provider's DID document and the request we
 * sent. Returns the key id and the header value (for the evidence record); throws
 * AnswerSignatureError saying what is wrong.
 */
export async function verifyAnswer(input: {
  header: string | undefined;
  body: Uint8Array;
  providerDid: string;
  request: AnsweredRequest;
  resolver: DidResolver;
}): Promise<{ kid: string; signature: string }> {
  const { header, request, providerDid } = input;
  if (!header) return refuse('the answer carries no signature');
  const parts = header.length <= MAX_HEADER_CHARS ? /^([\w-]+)\.\.([\w-]+)$/.exec(header) : null;
  if (!parts) return refuse('the signature is not a detached compact JWS');
  const [, protectedB64, signature] = parts as unknown as [string, string, string];
  let h: Record<string, unknown>;
  try {
    h = decodeProtectedHeader(`${protectedB64}..${signature}`);
  } catch {
    return refuse('the signature header cannot be decoded');
  }
  const alg = h.alg;
  if (typeof alg !== 'string' || !TOKEN_ALGORITHMS.includes(alg))
    refuse(`the algorithm ${String(alg)} is not accepted`);
  if (h.typ !== ANSWER_JWS_TYPE) refuse(`the signature is not of type ${ANSWER_JWS_TYPE}`);
  if (h.b64 !== false) refuse('the signature must be over the unencoded body (b64: false)');
  const kid = h.kid;
  if (typeof kid !== 'string' || !kid.startsWith(`${providerDid}#`))
    refuse(`the signing key is not one of the provider's (${providerDid})`);

  // What the signature says it answers must be what we asked.
  const expect = (claim: string, wanted: unknown) => {
    if (h[claim] !== wanted) refuse(`the signature is for another request (${claim})`);
  };
  expect('agr', request.agreementId);
  expect('nonce', request.nonce);
  expect('htm', request.method);
  expect('htu', request.target);
  expect('sts', request.status);
  const iat = h.iat;
  const now = Date.now() / 1000;
  if (typeof iat !== 'number' || Math.abs(now - iat) > MAX_AGE_SEC + CLOCK_SKEW_SEC)
    refuse('the signature is not from now (iat)');

  const key = await keyOf(input.resolver, providerDid, kid as string, alg as string);
  try {
    await flattenedVerify({ protected: protectedB64, payload: input.body, signature }, key, {
      algorithms: [alg as string],
    });
  } catch (err) {
    if (err instanceof errors.JWSSignatureVerificationFailed)
      refuse('the signature does not match the answer');
    if (err instanceof errors.JOSEError) refuse(`the signature is not valid (${err.code})`);
    throw err;
  }
  return { kid: kid as string, signature: header };
}

/** The key from the provider's DID document; a kid we do not know yet may be new: look once more. */
async function keyOf(resolver: DidResolver, did: string, kid: string, alg: string) {
  const resolve = async (fresh: boolean) => {
    try {
      return await resolver.resolve(did, { fresh });
    } catch (err) {
      if (err instanceof DidResolutionError)
        refuse(`the provider's DID document cannot be read (${err.reason})`);
      throw err;
    }
  };
  const method =
    findVerificationMethod(await resolve(false), kid, 'assertionMethod') ??
    findVerificationMethod(await resolve(true), kid, 'assertionMethod');
  if (!method) return refuse(`${did} lists no key ${kid} for assertionMethod`);
  if (method.controller !== did) refuse(`${kid} is controlled by another DID`);
  const jwk = method.publicKeyJwk;
  if (!jwk || 'd' in jwk || jwk.kty === 'oct') return refuse(`${kid} has no public key`);
  if (jwk.alg !== undefined && jwk.alg !== alg) refuse(`${kid} is a key for ${jwk.alg}, not ${alg}`);
  try {
    return await importJWK(jwk, alg);
  } catch {
    return refuse(`${kid} cannot be used with ${alg}`);
  }
}
