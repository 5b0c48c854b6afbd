/**
 * Dataspace Protocol 2025-1 documents we send and answer with (dsp-edc.md §1): compacted
 * JSON-LD with the DSP context as an array, un-prefixed terms.
 */
export const DSP_VERSION = '2025-1';
export const DSP_CONTEXT_URL = 'https://w3id.org/dspace/2025/1/context.jsonld';
export const DSP_CONTEXT = [DSP_CONTEXT_URL];
/** Path of our DSP endpoints below the connector's root. */
export const DSP_BASE_PATH = '/dsp';

export type OdrlOffer = Record<string, unknown> & { '@id': string; '@type'?: string; target?: string };

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

export const contractRequestMessage = (m: {
  id: string;
  consumerPid: string;
  callbackAddress: string;
  offer: OdrlOffer;
}) => ({
  '@context': DSP_CONTEXT,
  '@id': m.id,
  '@type': 'ContractRequestMessage',
  consumerPid: m.consumerPid,
  callbackAddress: m.callbackAddress,
  offer: m.offer,
});

export const contractOfferMessage = (m: {
  id: string;
  providerPid: string;
  consumerPid: string;
  offer: OdrlOffer;
}) => ({
  '@context': DSP_CONTEXT,
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
}) => ({
  '@context': DSP_CONTEXT,
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
