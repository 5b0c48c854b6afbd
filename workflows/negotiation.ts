/**
 * One contract negotiation, in either role (DSP 2025-1). Inbound messages arrive as Updates
 * whose validators consult the transition table in domain/negotiation.ts; the main loop sends
 * our part. Every state change is written to the read model by an activity.
 */
import {
  ApplicationFailure,
  allHandlersFinished,
  condition,
  proxyActivities,
  setHandler,
  upsertSearchAttributes,
  uuid4,
  workflowInfo,
} from '@temporalio/workflow';
import { defineSearchAttributeKey } from '@temporalio/common';
import type { NegotiationActivities } from '../activities/negotiation.js';
import {
  isTerminal,
  nextNegotiationState,
  otherParty,
  type NegotiationState,
} from '../domain/negotiation.js';
import {
  agreementVerificationMessage,
  contractAgreementMessage,
  contractOfferMessage,
  contractRequestMessage,
  dspUrl,
  negotiationEventMessage,
  negotiationTerminationMessage,
} from '../domain/dsp.js';
import type { HistoryEntry, NegotiationSnapshot } from '../db/negotiations.js';
import { deliverFromOutbox } from './outbox-delivery.js';
import {
  ALREADY_ENDED,
  ILLEGAL_TRANSITION,
  NOT_AWAITING_APPROVAL,
  ackQuery,
  decisionUpdate,
  startedUpdate,
  dspMessageUpdate,
  type InboundMessage,
  type NegotiationAck,
  type NegotiationInput,
  type OperatorDecision,
} from './negotiation-messages.js';

const { recordNegotiation, storeAgreement, enqueueProtocolMessage, recordAndEnqueue } =
  proxyActivities<NegotiationActivities>({
    startToCloseTimeout: '10 seconds',
    retry: { initialInterval: '100 ms', maximumInterval: '5 seconds' },
  });

export const STATE_KEY = defineSearchAttributeKey('ConnectorState', 'KEYWORD');
const PROCESS_KEY = defineSearchAttributeKey('ConnectorProcess', 'KEYWORD');
const ROLE_KEY = defineSearchAttributeKey('ConnectorRole', 'KEYWORD');
const COUNTERPARTY_KEY = defineSearchAttributeKey('Counterparty', 'KEYWORD');

export async function negotiation(input: NegotiationInput): Promise<NegotiationAck> {
  const { role } = input;
  const peer = otherParty(role);
  // Changed by Update handlers too: read through `currentState()` where TypeScript would narrow it.
  let state = 'INITIAL' as NegotiationState;
  const currentState = (): NegotiationState => state;
  let providerPid = input.providerPid;
  let version = 0;
  /** Snapshots written to the read model so far. */
  let recorded = 0;
  let error: string | null = null;
  let agreement: Record<string, unknown> | null = null;
  let approval: string | null = null;
  let expiresAt: string | null = null;
  let decidedBy: string | null = null;
  let decidedAt: string | null = null;
  let decision: OperatorDecision | null = null;
  /** The offer in force: the request's, or the last counter-offer. */
  let currentOffer = input.offer;
  /** A message an operator's decision asked us to send (counter-offer, acceptance). */
  let operatorSend: { type: string; path: string; body: Record<string, unknown> } | null = null;
  /** Our termination to send once the loop ends (operator, rejection, expiry). */
  let ourTermination: { code: string; reason: string[] } | null = null;
  const received = new Map<string, NegotiationAck>();
  const now = () => new Date().toISOString();
  const ack = (): NegotiationAck => ({ state, providerPid, consumerPid: input.consumerPid });

  function snapshot(): NegotiationSnapshot {
    return {
      id: input.id,
      workflow_id: workflowInfo().workflowId,
      role,
      state,
      consumer_pid: input.consumerPid,
      provider_pid: providerPid,
      counterparty_did: input.counterpartyDid,
      counterparty_address: input.counterpartyAddress,
      dataset_id: input.datasetId,
      offer_id: input.offerId,
      agreement_id: agreement ? String(agreement['@id']) : null,
      purpose: input.purpose,
      offer: currentOffer,
      connection_alias: input.connectionAlias,
      error,
      approval,
      expires_at: expiresAt,
      decided_by: decidedBy,
      decided_at: decidedAt,
      narrowing: input.narrowing,
      version: ++version,
    };
  }

  async function record(entry: Omit<HistoryEntry, 'at' | 'state'>, kind?: 'operator.decision') {
    upsertSearchAttributes([{ key: STATE_KEY, value: state }]);
    await recordNegotiation(snapshot(), { at: now(), state, ...entry }, kind);
    recorded++;
  }

  /** Our message to the counterparty, as an outbox row (its evidence id chosen here, so retries append once). */
  const outbound = (messageType: string, path: string, body: Record<string, unknown>) => ({
    process_id: input.id,
    kind: 'negotiation',
    message_type: messageType,
    counterparty_did: input.counterpartyDid,
    url: dspUrl(input.counterpartyAddress, path),
    body,
    evidence_id: `ev_${uuid4()}`,
  });

  /** Records our message as evidence and writes it to the outbox; delivery follows (bounded retries). */
  const enqueue = (messageType: string, path: string, body: Record<string, unknown>) =>
    enqueueProtocolMessage(outbound(messageType, path, body));

  /** Records the state (already moved) with our outbound message and queues the message, in one activity. */
  async function recordSend(messageType: string, path: string, body: Record<string, unknown>) {
    upsertSearchAttributes([{ key: STATE_KEY, value: state }]);
    const queued = await recordAndEnqueue(
      snapshot(),
      { at: now(), state, message_type: messageType, direction: 'outbound', note: null },
      outbound(messageType, path, body),
    );
    recorded++;
    return queued;
  }

  /**
   * Moves to `to` and sends our message: state and message are recorded first, so the peer's
   * answer is accepted even if it arrives before our delivery returns. An undeliverable message
   * ends the negotiation.
   */
  async function transitionAndSend(
    to: NegotiationState,
    messageType: string,
    path: string,
    body: Record<string, unknown>,
  ) {
    state = to;
    const { outboxId } = await recordSend(messageType, path, body);
    const result = await deliverFromOutbox(outboxId, input.retry);
    if (!result.delivered && !isTerminal(state)) {
      state = 'TERMINATED';
      error = result.error;
      await record({ message_type: null, direction: 'internal', evidence_id: null, note: result.error });
    }
    return result;
  }

  const peerPath = (suffix: string) =>
    role === 'provider'
      ? `negotiations/${input.consumerPid}/${suffix}`
      : `negotiations/${providerPid ?? ''}/${suffix}`;

  // So that the Temporal UI can list and filter negotiations (registered at dev-server start).
  upsertSearchAttributes([
    { key: PROCESS_KEY, value: 'negotiation' },
    { key: ROLE_KEY, value: role },
    { key: COUNTERPARTY_KEY, value: input.counterpartyDid },
  ]);
  setHandler(ackQuery, ack);
  setHandler(startedUpdate, async () => {
    await condition(() => recorded >= 1);
    return ack();
  });

  setHandler(
    dspMessageUpdate,
    async (message: InboundMessage) => {
      if (message.messageId && received.has(message.messageId)) return received.get(message.messageId)!;
      const to = nextNegotiationState(state, message.kind, peer)!;
      if (message.kind === 'ContractAgreementMessage') {
        agreement = (message.body.agreement as Record<string, unknown>) ?? null;
        providerPid ??= String(message.body.providerPid);
      }
      if (message.kind === 'ContractOfferMessage') {
        providerPid ??= String(message.body.providerPid);
        currentOffer = message.body.offer as typeof currentOffer;
      }
      if (message.kind === 'ContractRequestMessage' && role === 'provider' && state !== 'INITIAL') {
        // A counter-request: the consumer's offer, to be decided as a new request.
        currentOffer = message.body.offer as typeof currentOffer;
        approval = null;
        decision = null;
      }
      if (message.kind === 'ContractNegotiationTerminationMessage') {
        const reasons = (message.body.reason as string[] | undefined) ?? [];
        error =
          [message.body.code, ...reasons].filter(Boolean).join(': ') || 'terminated by the counterparty';
        // A request still waiting for our operator is not awaiting anything any more.
        if (approval === 'pending') approval = null;
      }
      state = to;
      await record({
        message_type: message.body['@type'] as string,
        direction: 'inbound',
        evidence_id: message.evidenceId,
        note: null,
      });
      if (state === 'FINALIZED' && agreement) await storeAgreementOnce();
      const answer = ack();
      if (message.messageId) received.set(message.messageId, answer);
      return answer;
    },
    {
      validator: (message: InboundMessage) => {
        if (message.messageId && received.has(message.messageId)) return;
        if (nextNegotiationState(state, message.kind, peer) === null) {
          throw ApplicationFailure.create({
            type: ILLEGAL_TRANSITION,
            message: `${message.kind} from the ${peer} is not allowed in state ${state}`,
            nonRetryable: true,
          });
        }
      },
    },
  );

  setHandler(
    decisionUpdate,
    async (d: OperatorDecision) => {
      decision = d;
      decidedBy = d.by;
      decidedAt = now();
      const awaiting = approval === 'pending';
      if (d.action === 'counter_offer' && d.offer) {
        approval = 'countered';
        currentOffer = { ...d.offer, '@type': 'Offer', target: input.datasetId ?? d.offer.target };
        state = 'OFFERED';
        operatorSend = {
          type: 'ContractOfferMessage',
          path: peerPath('offers'),
          body: contractOfferMessage({
            id: `urn:uuid:${uuid4()}`,
            providerPid: input.id,
            consumerPid: input.consumerPid,
            offer: currentOffer,
          }),
        };
        await record(
          { message_type: null, direction: 'internal', evidence_id: null, note: `counter-offer by ${d.by}` },
          'operator.decision',
        );
        return ack();
      }
      if (d.action === 'accept') {
        state = 'ACCEPTED';
        operatorSend = {
          type: 'ContractNegotiationEventMessage',
          path: peerPath('events'),
          body: negotiationEventMessage({
            id: `urn:uuid:${uuid4()}`,
            providerPid: providerPid ?? '',
            consumerPid: input.consumerPid,
            eventType: 'ACCEPTED',
          }),
        };
        await record(
          { message_type: null, direction: 'internal', evidence_id: null, note: `accepted by ${d.by}` },
          'operator.decision',
        );
        return ack();
      }
      if (d.action === 'approve') {
        approval = 'approved';
        await record(
          {
            message_type: null,
            direction: 'internal',
            evidence_id: null,
            note: `approved by ${d.by}`,
          },
          'operator.decision',
        );
        return ack();
      }
      // Reject, or terminate (which, for a request awaiting approval, is a rejection).
      if (awaiting) approval = 'rejected';
      const reason = d.reason ?? (awaiting ? 'rejected by the provider' : 'terminated by the operator');
      ourTermination = { code: awaiting ? 'rejected' : 'terminated', reason: [reason] };
      error = reason;
      state = 'TERMINATED';
      await record(
        {
          message_type: null,
          direction: 'internal',
          evidence_id: null,
          note: `${d.action} by ${d.by}: ${reason}`,
        },
        'operator.decision',
      );
      return ack();
    },
    {
      validator: (d: OperatorDecision) => {
        if (d.action === 'terminate') {
          if (isTerminal(state)) {
            throw ApplicationFailure.create({
              type: ALREADY_ENDED,
              message: `the negotiation has ended (${state})`,
              nonRetryable: true,
            });
          }
          return;
        }
        if (d.action === 'accept') {
          if (role !== 'consumer' || state !== 'OFFERED') {
            throw ApplicationFailure.create({
              type: NOT_AWAITING_APPROVAL,
              message: `there is no counter-offer to accept (${state})`,
              nonRetryable: true,
            });
          }
          return;
        }
        if (d.action === 'counter_offer' && !d.offer) {
          throw ApplicationFailure.create({
            type: NOT_AWAITING_APPROVAL,
            message: 'a counter-offer needs an offer',
            nonRetryable: true,
          });
        }
        if (approval !== 'pending' || decision !== null || isTerminal(state)) {
          throw ApplicationFailure.create({
            type: NOT_AWAITING_APPROVAL,
            message:
              approval === 'expired'
                ? 'the request expired before a decision'
                : 'the negotiation is not awaiting approval',
            nonRetryable: true,
          });
        }
      },
    },
  );

  let agreementStored = false;
  async function storeAgreementOnce() {
    if (agreementStored || !agreement) return;
    agreementStored = true;
    await storeAgreement({
      id: String(agreement['@id']),
      negotiation_id: input.id,
      role,
      provider_did: role === 'provider' ? input.ourDid : input.counterpartyDid,
      consumer_did: role === 'consumer' ? input.ourDid : input.counterpartyDid,
      dataset_id: text(agreement.target) ?? input.datasetId ?? '',
      offer_id: input.offerId,
      agreement,
      narrowing: input.narrowing,
      connection_alias: input.connectionAlias,
      signed_at: text(agreement.timestamp) ?? now(),
    });
  }

  if (role === 'consumer') {
    const request = contractRequestMessage({
      id: `urn:uuid:${uuid4()}`,
      consumerPid: input.consumerPid,
      callbackAddress: input.ourAddress,
      offer: input.offer,
    });
    const sent = await transitionAndSend(
      'REQUESTED',
      'ContractRequestMessage',
      'negotiations/request',
      request,
    );
    const answer = sent.delivered ? (sent.body as { providerPid?: unknown } | null) : null;
    if (typeof answer?.providerPid === 'string' && providerPid === null) {
      providerPid = answer.providerPid;
      await record({
        message_type: 'ContractNegotiation',
        direction: 'inbound',
        evidence_id: null,
        note: 'request acknowledged',
      });
    }
  } else {
    // The initial request arrived with the start (update-with-start).
    await condition(() => state !== 'INITIAL');
  }

  while (!isTerminal(state)) {
    const current = currentState();
    if (operatorSend) {
      const m: { type: string; path: string; body: Record<string, unknown> } = operatorSend;
      operatorSend = null;
      const { outboxId } = await recordSend(m.type, m.path, m.body);
      const result = await deliverFromOutbox(outboxId, input.retry);
      if (!result.delivered && !isTerminal(state)) {
        state = 'TERMINATED';
        error = result.error;
        await record({ message_type: null, direction: 'internal', evidence_id: null, note: result.error });
      }
      continue;
    }
    if (role === 'provider' && (current === 'REQUESTED' || current === 'ACCEPTED')) {
      if (
        current === 'REQUESTED' &&
        input.approval === 'manual' &&
        approval !== 'approved' &&
        approval !== 'countered'
      ) {
        approval = 'pending';
        expiresAt = new Date(Date.now() + input.approvalTimeoutMs).toISOString();
        await record({
          message_type: null,
          direction: 'internal',
          evidence_id: null,
          note: 'awaiting approval',
        });
        const decided = await condition(
          () => decision !== null || state !== current,
          input.approvalTimeoutMs,
        );
        if (!decided) {
          approval = 'expired';
          error = 'the request expired before an operator approved it';
          ourTermination = { code: 'approval_expired', reason: [error] };
          state = 'TERMINATED';
          await record({ message_type: null, direction: 'internal', evidence_id: null, note: error });
        }
        continue;
      }
      if (current === 'REQUESTED' && approval === 'countered') {
        await condition(() => state !== current);
        continue;
      }
      agreement = {
        '@id': `urn:uuid:${uuid4()}`,
        '@type': 'Agreement',
        target: input.datasetId ?? currentOffer.target,
        assigner: input.ourDid,
        assignee: input.counterpartyDid,
        timestamp: now(),
        ...rulesOf(currentOffer),
      };
      await transitionAndSend(
        'AGREED',
        'ContractAgreementMessage',
        peerPath('agreement'),
        contractAgreementMessage({
          id: `urn:uuid:${uuid4()}`,
          providerPid: input.id,
          consumerPid: input.consumerPid,
          agreement,
        }),
      );
    } else if (role === 'provider' && current === 'VERIFIED') {
      await storeAgreementOnce();
      // A termination may have arrived meanwhile: it wins, nothing is finalized.
      if (currentState() !== current) continue;
      await transitionAndSend(
        'FINALIZED',
        'ContractNegotiationEventMessage',
        peerPath('events'),
        negotiationEventMessage({
          id: `urn:uuid:${uuid4()}`,
          providerPid: input.id,
          consumerPid: input.consumerPid,
          eventType: 'FINALIZED',
        }),
      );
    } else if (role === 'consumer' && current === 'AGREED') {
      await transitionAndSend(
        'VERIFIED',
        'ContractAgreementVerificationMessage',
        peerPath('agreement/verification'),
        agreementVerificationMessage({
          id: `urn:uuid:${uuid4()}`,
          providerPid: providerPid ?? '',
          consumerPid: input.consumerPid,
        }),
      );
    } else {
      // Our move is done; the counterparty's message (or an operator) moves us on.
      await condition(() => state !== current);
    }
  }

  if (ourTermination) {
    // Best effort: the counterparty learns why; an undeliverable termination changes nothing here.
    const t: { code: string; reason: string[] } = ourTermination;
    const { outboxId, evidenceId } = await enqueue(
      'ContractNegotiationTerminationMessage',
      peerPath('termination'),
      negotiationTerminationMessage({
        id: `urn:uuid:${uuid4()}`,
        providerPid: role === 'provider' ? input.id : (providerPid ?? ''),
        consumerPid: input.consumerPid,
        code: t.code,
        reason: t.reason,
      }),
    );
    const sent = await deliverFromOutbox(outboxId, input.retry);
    await record({
      message_type: 'ContractNegotiationTerminationMessage',
      direction: 'outbound',
      evidence_id: evidenceId,
      note: sent.delivered ? null : sent.error,
    });
  }

  // Let Update handlers that moved us here finish (their callers are waiting for the answer).
  await condition(allHandlersFinished);
  return ack();
}

const text = (v: unknown): string | null => (typeof v === 'string' ? v : null);

/** The rules of an offer, carried into the agreement (an Agreement's rules have no target). */
function rulesOf(offer: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const key of ['permission', 'prohibition', 'obligation'])
    if (offer[key] !== undefined) out[key] = offer[key];
  return out;
}
