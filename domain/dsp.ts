/**
 * Dataspace Protocol 2025-1 documents we send and answer with (dsp-edc.md §1): compacted
 * JSON-LD with the DSP context as an array, un-prefixed terms.
 */
export const DSP_VERSION = '2025-1';
export const DSP_CONTEXT_URL = 'https://w3id.org/dspace/2025/1/context.jsonld';
export const DSP_CONTEXT = [DSP_CONTEXT_URL];
/** Path of our DSP endpoints below the connector's root. */
export const DSP_BASE_PATH = '/dsp';

/**
 * Our own JSON-LD context (the `pl:` terms of rules and datasets, `narrowing`), a file in the
 * repository (api/protocol/contexts/) served unauthenticated by every connector at this path.
 * Messages that carry rules name it after the DSP context, so that they expand completely.
 */
export const BUILDING_DATA_CONTEXT_PATH = '/contexts/building-data-v1.jsonld';
export const buildingDataContextUrl = (publicUrl: string) =>
  `${publicUrl.replace(/\/+$/, '')}${BUILDING_DATA_CONTEXT_PATH}`;
/** The @context of a message: DSP 2025-1, then ours when the message carries rules. */
export const messageContext = (ourContext: string | null): string[] =>
  ourContext ? [DSP_CONTEXT_URL, ourContext] : [DSP_CONTEXT_URL];

export type OdrlOffer = Record<string, unknown> & { '@id': string; '@type'?: string; target?: string };

/**
 * The rules of a policy as the DSP schema wants them on the wire: permission, prohibition and
 * obligation each left out when empty (PolicyClass has `minItems: 1`).
 */
export function wireRules(policy: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const key of ['permission', 'prohibition', 'obligation']) {
    const rules = policy[key];
    if (rules !== undefined && !(Array.isArray(rules) && rules.length === 0)) out[key] = rules;
  }
  return out;
}

export const negotiationAck = (providerPid: string, consumerPid: string, state: string) => ({
  '@context': DSP_CONTEXT,
  '@type': 'ContractNegotiation',
  providerPid,
  consumerPid,
  state,
});

export const negotiationError = (
  pids: { providerPid?: string | null; consumerPid?: string | null },
  code: string,
  reason: string[],
) => ({
  '@context': DSP_CONTEXT,
  '@type': 'ContractNegotiationError',
  providerPid: pids.providerPid ?? '',
  consumerPid: pids.consumerPid ?? '',
  code,
  reason,
});

/** An initial request carries our callbackAddress; a counter-request the providerPid instead (the schema's oneOf). */
export const contractRequestMessage = (m: {
  id: string;
  consumerPid: string;
  callbackAddress?: string;
  providerPid?: string;
  offer: OdrlOffer;
  context: string | null;
}) => ({
  '@context': messageContext(m.context),
  '@id': m.id,
  '@type': 'ContractRequestMessage',
  ...(m.providerPid ? { providerPid: m.providerPid } : {}),
  consumerPid: m.consumerPid,
  ...(m.providerPid ? {} : { callbackAddress: m.callbackAddress }),
  offer: m.offer,
});

export const contractOfferMessage = (m: {
  id: string;
  providerPid: string;
  consumerPid: string;
  offer: OdrlOffer;
  context: string | null;
}) => ({
  '@context': messageContext(m.context),
  '@id': m.id,
  '@type': 'ContractOfferMessage',
  providerPid: m.providerPid,
  consumerPid: m.consumerPid,
  offer: m.offer,
});

export const contractAgreementMessage = (m: {
  id: string;
  providerPid: string;
  consumerPid: string;
  agreement: Record<string, unknown>;
  context: string | null;
}) => ({
  '@context': messageContext(m.context),
  '@id': m.id,
  '@type': 'ContractAgreementMessage',
  providerPid: m.providerPid,
  consumerPid: m.consumerPid,
  agreement: m.agreement,
});

export const agreementVerificationMessage = (m: {
  id: string;
  providerPid: string;
  consumerPid: string;
}) => ({
  '@context': DSP_CONTEXT,
  '@id': m.id,
  '@type': 'ContractAgreementVerificationMessage',
  providerPid: m.providerPid,
  consumerPid: m.consumerPid,
});

export const negotiationEventMessage = (m: {
  id: string;
  providerPid: string;
  consumerPid: string;
  eventType: 'ACCEPTED' | 'FINALIZED';
}) => ({
  '@context': DSP_CONTEXT,
  '@id': m.id,
  '@type': 'ContractNegotiationEventMessage',
  providerPid: m.providerPid,
  consumerPid: m.consumerPid,
  eventType: m.eventType,
});

export const negotiationTerminationMessage = (m: {
  id: string;
  providerPid: string;
  consumerPid: string;
  code: string;
  reason: string[];
}) => ({
  '@context': DSP_CONTEXT,
  '@id': m.id,
  '@type': 'ContractNegotiationTerminationMessage',
  providerPid: m.providerPid,
  consumerPid: m.consumerPid,
  code: m.code,
  ...(m.reason.length ? { reason: m.reason } : {}),
});

/** Joins a callback or base address and a relative DSP path, with or without a trailing slash. */
export const dspUrl = (base: string, path: string) =>
  `${base.replace(/\/+$/, '')}/${path.replace(/^\/+/, '')}`;

const IPV4 = /^\d{1,3}(?:\.\d{1,3}){3}$/;
const isLoopback = (host: string) =>
  host === 'localhost' || host === '[::1]' || (IPV4.test(host) && host.startsWith('127.'));

/**
 * Why we refuse a peer's callbackAddress before any lookup, or null (dsp-edc.md §1.7: an address
 * we cannot use is an unrecoverable error). It must be an absolute https base without
 * credentials, query or fragment, on the host of the peer's did:web DID or a subdomain of it,
 * so that a peer can only have our messages sent to itself. Loopback (over http too) only with
 * the allowance that also lets loopback DIDs resolve (DID_WEB_ALLOW_HTTP), for local runs.
 */
export function callbackAddressProblem(
  address: string,
  peerDid: string,
  allowLoopback: boolean,
): string | null {
  let url: URL;
  try {
    url = new URL(address);
  } catch {
    return 'the callbackAddress is not a URL';
  }
  const host = url.hostname.toLowerCase();
  if (url.username || url.password) return 'the callbackAddress must not carry credentials';
  if (url.search || url.hash) return 'the callbackAddress must not have a query or fragment';
  if (isLoopback(host)) {
    if (!allowLoopback) return 'the callbackAddress is a loopback address';
    if (url.protocol !== 'https:' && url.protocol !== 'http:')
      return 'the callbackAddress must be an http(s) URL';
  } else if (url.protocol !== 'https:') {
    return 'the callbackAddress must be an https URL';
  }
  const didHost = /^did:web:([^:]+)/
    .exec(peerDid)?.[1]
    ?.replace(/%3A.*$/i, '')
    .toLowerCase();
  if (!didHost) return 'the callbackAddress cannot be bound to the caller (not a did:web DID)';
  const bound =
    host === didHost ||
    host.endsWith(`.${didHost}`) ||
    (allowLoopback && isLoopback(host) && isLoopback(didHost));
  if (!bound) return `the callbackAddress is not on the caller's host (${didHost})`;
  return null;
}
