/** Messages of the negotiation workflow, shared by the workflow and the API (defined once). */
import { defineQuery, defineUpdate } from '@temporalio/workflow';
import type { ApprovalMode, NegotiationMessage, NegotiationState, Party } from '../domain/negotiation.js';
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
  /** Our JSON-LD context document (the `pl:` terms), named in messages that carry rules. */
  ourContext: string | null;
  /** Who opened the negotiation: the consumer's request (default) or the provider's offer. */
  initiatedBy?: Party;
  counterpartyDid: string;
  /**
   * The counterparty's participant id as it signs agreements (`assigner`): its DID unless the
   * operator named another (a peer identified otherwise, such as the DSP TCK).
   */
  counterpartyId?: string | null;
  /** The counterparty's DSP base (provider) or callback address (consumer). */
  counterpartyAddress: string;
  offer: OdrlOffer;
  datasetId: string | null;
  offerId: string | null;
  purpose: string | null;
  connectionAlias: string | null;
  narrowing: Record<string, unknown> | null;
  /**
   * Which of our moves wait for an operator (domain/negotiation.ts ApprovalMode): provider, the
   * offer's mode; consumer, `stepwise` when the operator asked for it, else `automatic`.
   */
  approval: ApprovalMode;
  approvalTimeoutMs: number;
  /** How long we wait for the counterparty's next message before terminating (NEGOTIATION_DEADLINE). */
  responseTimeoutMs: number;
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
   * Consumer: accept, reject or counter_request (with `offer`) an offer. Either: terminate; and,
   * in a stepwise negotiation, approve the move we hold (domain/negotiation.ts STEPWISE_HOLDS).
   */
  action: 'approve' | 'reject' | 'terminate' | 'counter_offer' | 'counter_request' | 'accept';
  by: string;
  reason: string | null;
  offer?: OdrlOffer;
}

/** Failure types the API maps to answers: illegal transition (DSP 400 / management 409). */
export const ILLEGAL_TRANSITION = 'IllegalTransition';
/** The message names another counterparty process than the one we know (DSP 400 pid_mismatch). */
export const PID_MISMATCH = 'PidMismatch';
/** A counter-request for an offer that is not part of this negotiation (DSP 400 unknown_offer). */
export const OFFER_MISMATCH = 'OfferMismatch';
/** Validator failures and the DSP error code each becomes (always 400). */
export const DSP_REFUSALS: Record<string, string> = {
  [ILLEGAL_TRANSITION]: 'invalid_transition',
  [PID_MISMATCH]: 'pid_mismatch',
  [OFFER_MISMATCH]: 'unknown_offer',
};
export const NOT_AWAITING_APPROVAL = 'NotAwaitingApproval';
export const ALREADY_ENDED = 'AlreadyEnded';

export const dspMessageUpdate = defineUpdate<NegotiationAck, [InboundMessage]>('dspMessage');
export const decisionUpdate = defineUpdate<NegotiationAck, [OperatorDecision]>('operatorDecision');
export const ackQuery = defineQuery<NegotiationAck>('ack');
/** Answers once the negotiation's read model exists (the API starts a consumer negotiation with it). */
export const startedUpdate = defineUpdate<NegotiationAck>('started');
