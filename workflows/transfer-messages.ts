/** Messages of the transfer and agreement-termination workflows, shared by the workflows and the API. */
import { defineQuery, defineSignal, defineUpdate } from '@temporalio/workflow';
import type { Party } from '../domain/negotiation.js';
import type { TransferAction, TransferMessage, TransferState } from '../domain/transfer.js';
import type { DeliveryRetry } from '../domain/outbox.js';
import type { DataAddress } from '../gateway/dataplane/access.js';

export interface TransferInput {
  role: Party;
  /** Our process id: the providerPid as provider, the consumerPid as consumer. */
  id: string;
  consumerPid: string;
  providerPid: string | null;
  agreementId: string;
  datasetId: string | null;
  format: string;
  ourDid: string;
  /** Our DSP base address (what we give as callbackAddress). */
  ourAddress: string;
  counterpartyDid: string;
  /** The provider's DSP base (consumer) or the consumer's callback address (provider). */
  counterpartyAddress: string;
  /** Consumer: the connection this transfer serves. */
  connectionAlias: string | null;
  /** Provider: our data plane base (`{publicUrl}/dataplane/v1`), where pull tokens are valid. */
  dataplaneEndpoint: string | null;
  /**
   * Provider: the agreement's offer is `stepwise`; the first start waits in REQUESTED for an
   * operator's `start` (or terminate) until `approvalTimeoutMs` has passed.
   */
  startApproval?: { timeoutMs: number } | null;
  retry: DeliveryRetry;
  /** Events after which the workflow continues as new (TRANSFER_HISTORY_LIMIT); else Temporal's suggestion. */
  historyLimit?: number | null;
  /** What the previous run handed over when it continued as new. */
  carried?: TransferCarry | null;
}

/**
 * A running transfer's state, handed from one run to the next: a transfer that never ends (a
 * connection's) renews its token every few minutes, and a history that grows without bound
 * would end it at Temporal's limit.
 */
export interface TransferCarry {
  state: TransferState;
  providerPid: string | null;
  version: number;
  error: string | null;
  dataAddress: DataAddress | null;
  addressReceivedAt: number;
  renewalBlocked: boolean;
  renewalRetryAt: number | null;
  flowState: string | null;
  issued: number;
  /** The latest inbound message ids with their answers (a repeat still has no second effect). */
  received: Array<[string, TransferAck]>;
}

export interface InboundTransferMessage {
  kind: TransferMessage;
  body: Record<string, unknown>;
  /** The message's @id, when it has one: a repeated message is answered without a second effect. */
  messageId: string | null;
  evidenceId: string | null;
}

export interface TransferAck {
  state: TransferState;
  providerPid: string | null;
  consumerPid: string;
}

export interface TransferDecision {
  action: TransferAction;
  by: string;
  reason: string | null;
}

/** The agreement this transfer runs under has ended: the transfer ends without a message of its own. */
export interface AgreementEnded {
  endedBy: Party;
  reason: string | null;
}

/** Failure type the API maps to answers: illegal transition (DSP 400 / management 409). */
export const ILLEGAL_TRANSFER_TRANSITION = 'IllegalTransition';
/** Activity failure types the workflows act on. */
export const AGREEMENT_ENDED = 'AgreementEnded';
export const RENEWAL_REFUSED = 'RenewalRefused';

export const transferMessageUpdate = defineUpdate<TransferAck, [InboundTransferMessage]>('transferMessage');
export const transferDecisionUpdate = defineUpdate<TransferAck, [TransferDecision]>('transferDecision');
/** Answers once the transfer's read model exists (the API starts a consumer transfer with it). */
export const transferStartedUpdate = defineUpdate<TransferAck>('transferStarted');
export const agreementEndedSignal = defineSignal<[AgreementEnded]>('agreementEnded');

/** A newer transfer took this transfer's connection over: this one ends (consumer side). */
export interface ConnectionSuperseded {
  alias: string;
  /** The transfer that serves the connection now. */
  by: string;
}
export const connectionSupersededSignal = defineSignal<[ConnectionSuperseded]>('connectionSuperseded');
export const transferAckQuery = defineQuery<TransferAck>('transferAck');

export interface AgreementTerminationInput {
  agreementId: string;
  /** Our role in the agreement. */
  role: Party;
  counterpartyDid: string;
  /** The counterparty's DSP base (where its `/agreements/{id}/termination` is). */
  counterpartyAddress: string | null;
  retry: DeliveryRetry;
}

export interface EndAgreement {
  /** Whether we end it (and tell the counterparty) or the counterparty told us. */
  by: 'us' | 'counterparty';
  code: string;
  reason: string | null;
  /** Who asked, for the evidence: an operator, or the counterparty's DID. */
  actor: string;
  /** The counterparty's message as evidence, when it told us. */
  evidenceId: string | null;
}

export interface AgreementEndAck {
  agreementId: string;
  endedAt: string;
  endedBy: Party;
  /** Transfers under the agreement that this ending stopped. */
  transfers: string[];
}

export const endAgreementUpdate = defineUpdate<AgreementEndAck, [EndAgreement]>('endAgreement');
