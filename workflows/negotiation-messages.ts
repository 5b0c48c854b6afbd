/** Messages of the negotiation workflow, shared by the workflow and the API (defined once). */
import { defineQuery, defineUpdate } from '@temporalio/workflow';
import type { NegotiationMessage, NegotiationState, Party } from '../domain/negotiation.js';
import type { DeliveryRetry } from '../domain/outbox.js';
import type { OdrlOffer } from '../domain/dsp.js';

export interface NegotiationInput {
  role: Party;
  /** Our process id: the providerPid as provider, the consumerPid as consumer. */
  id: string;
  consumerPid: string;
  providerPid: string | null;
  ourDid: string;
  /** Our DSP base address (what we give as callbackAddress). */
  ourAddress: string;
  counterpartyDid: string;
  /** The counterparty's DSP base (provider) or callback address (consumer). */
  counterpartyAddress: string;
  offer: OdrlOffer;
  datasetId: string | null;
  offerId: string | null;
  purpose: string | null;
  connectionAlias: string | null;
  narrowing: Record<string, unknown> | null;
  /** Provider only: whether an operator must approve the request. */
  approval: 'automatic' | 'manual';
  approvalTimeoutMs: number;
  retry: DeliveryRetry;
}

export interface InboundMessage {
  kind: NegotiationMessage;
  body: Record<string, unknown>;
  /** The message's @id, when it has one: a repeated message is answered without a second effect. */
  messageId: string | null;
  evidenceId: string | null;
}

export interface NegotiationAck {
  state: NegotiationState;
  providerPid: string | null;
  consumerPid: string;
}

export interface OperatorDecision {
  /**
   * Provider: approve, reject, or counter_offer (with `offer`) a request awaiting approval.
   * Consumer: accept a counter-offer. Either: terminate.
   */
  action: 'approve' | 'reject' | 'terminate' | 'counter_offer' | 'accept';
  by: string;
  reason: string | null;
  offer?: OdrlOffer;
}

/** Failure types the API maps to answers: illegal transition (DSP 400 / management 409). */
export const ILLEGAL_TRANSITION = 'IllegalTransition';
export const NOT_AWAITING_APPROVAL = 'NotAwaitingApproval';
export const ALREADY_ENDED = 'AlreadyEnded';

export const dspMessageUpdate = defineUpdate<NegotiationAck, [InboundMessage]>('dspMessage');
export const decisionUpdate = defineUpdate<NegotiationAck, [OperatorDecision]>('operatorDecision');
export const ackQuery = defineQuery<NegotiationAck>('ack');
/** Answers once the negotiation's read model exists (the API starts a consumer negotiation with it). */
export const startedUpdate = defineUpdate<NegotiationAck>('started');
