/**
 * One contract negotiation, in either role (DSP 2025-1). Inbound messages arrive as Updates
 * whose validators consult the transition table in domain/negotiation.ts; the main loop sends
 * our part. Every state change is written to the read model by an activity.
 */
import {
  ActivityFailure,
  ApplicationFailure,
  allHandlersFinished,
  condition,
  proxyActivities,
  proxyLocalActivities,
  setHandler,
  upsertSearchAttributes,
  uuid4,
  workflowInfo,
} from '@temporalio/workflow';
import { defineSearchAttributeKey, type ActivityOptions, type Duration } from '@temporalio/common';
import type {
  NegotiationActivities,
  NegotiationWrite,
  OutboundMessage,
  QueuedMessage,
} from '../activities/negotiation.js';
import {
  agreementProblems,
  counterpartyError,
  hasRules,
  isHarmlessRepeat,
  isTerminal,
  nextNegotiationState,
  otherParty,
  sameRules,
  STEPWISE_HOLDS,
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
  wireRules,
  type OdrlOffer,
} from '../domain/dsp.js';
import type { HistoryEntry, NegotiationSnapshot } from '../db/negotiations.js';
import { deliverFromOutbox } from './outbox-delivery.js';
import { startConnectionTransfer } from './transfer.js';
import {
  ALREADY_ENDED,
  ILLEGAL_TRANSITION,
  NOT_AWAITING_APPROVAL,
  OFFER_MISMATCH,
  PID_MISMATCH,
  ackQuery,
  decisionUpdate,
  startedUpdate,
  dspMessageUpdate,
  type InboundMessage,
  type NegotiationAck,
  type NegotiationInput,
  type OperatorDecision,
} from './negotiation-messages.js';

const { enqueueProtocolMessage } = proxyActivities<NegotiationActivities>({
  startToCloseTimeout: '10 seconds',
  retry: { initialInterval: '100 ms', maximumInterval: '5 seconds' },
});
/**
 * The read model, evidence and outbox writes, in batches (see the queue in the workflow). A
 * normal activity, not a local one: a local activity runs before its workflow task is recorded,
 * so after a crash the read model (and the outbox) could show a change the workflow no longer
 * has, and an operator would act on it (docs/decisions/0006).
 */
const { recordNegotiationWrites } = proxyActivities<NegotiationActivities>({
  startToCloseTimeout: '10 seconds',
  retry: { initialInterval: '100 ms', maximumInterval: '5 seconds' },
});
/**
 * An agreement that cannot be stored (its id taken by another negotiation, a database that stays
 * away) must not keep the negotiation retrying forever: about five minutes, then it ends with
 * the reason.
 */
const storeAgreementOptions: ActivityOptions = {
  startToCloseTimeout: '10 seconds',
  retry: {
    initialInterval: '200 ms',
    maximumInterval: '30 seconds',
    maximumAttempts: 15,
    nonRetryableErrorTypes: ['AgreementConflict'],
  },
};
const { storeAgreement } = proxyActivities<NegotiationActivities>(storeAgreementOptions);
/**
 * The same from the main loop, as a local activity (inside the workflow task, no round trip).
 * Storing is idempotent, and an agreement stored before the negotiation ends otherwise (a
 * termination crossing the verification, or a task lost in a crash) is a case that exists anyway.
 */
const { storeAgreement: storeAgreementLocally } =
  proxyLocalActivities<NegotiationActivities>(storeAgreementOptions);

export const STATE_KEY = defineSearchAttributeKey('ConnectorState', 'KEYWORD');
const PROCESS_KEY = defineSearchAttributeKey('ConnectorProcess', 'KEYWORD');
const ROLE_KEY = defineSearchAttributeKey('ConnectorRole', 'KEYWORD');
const COUNTERPARTY_KEY = defineSearchAttributeKey('Counterparty', 'KEYWORD');

export async function negotiation(input: NegotiationInput): Promise<NegotiationAck> {
  const { role } = input;
  const peer = otherParty(role);
  const initiatedBy = input.initiatedBy ?? 'consumer';
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
  /** Stepwise: the state in which our operator last approved our next move. */
  let approvedIn: NegotiationState | null = null;
  /** Whether our next move from `s` waits for our operator (stepwise), not yet approved there. */
  const heldAt = (s: NegotiationState) =>
    input.approval === 'stepwise' && STEPWISE_HOLDS[role].includes(s) && approvedIn !== s;
  /** Whether the operator is asked about a move of ours (not about a request or offer). */
  const holdingMove = () => approval === 'pending' && STEPWISE_HOLDS[role].includes(state);
  /** The offer in force: the request's, or the last counter-offer or counter-request. */
  let currentOffer = input.offer;
  /** Offers made in this negotiation, by id: what a counter-request may refer to. */
  const offers = new Map<string, OdrlOffer>([[input.offer['@id'], input.offer]]);
  /** Provider: the consumer asks for other rules than the offer's; only an operator can agree to them. */
  let termsDiffer = false;
  /** A message an operator's decision asked us to send (counter-offer, acceptance). */
  let operatorSend: { type: string; path: string; body: Record<string, unknown> } | null = null;
  /** Our termination to send once the loop ends (operator, rejection, expiry, a failure). */
  let ourTermination: { code: string; reason: string[] } | null = null;
  /** Answers to messages by their @id: a repeated message gets the same answer and no second effect. */
  const received = new Map<string, NegotiationAck>();
  /** Messages being handled: a repeat arriving meanwhile waits for the first one's answer. */
  const inFlight = new Set<string>();
  const now = () => new Date().toISOString();
  const ack = (): NegotiationAck => ({ state, providerPid, consumerPid: input.consumerPid });
  const refuse = (type: string, message: string) =>
    ApplicationFailure.create({ type, message, nonRetryable: true });

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

  /**
   * Writes to the read model go through one queue. The main loop writes what it queues at once,
   * together with what Update handlers queued before it (an inbound message and our answer to
   * it: one activity). A handler's write waits for the main loop while the loop is about to act
   * on the change (`loopWaitsFor` holds); once the loop is parked on something that cannot move
   * it in this activation (the counterparty, an operator, an activity), the writer below
   * writes it alone. Versions are taken in queue order; writes may overlap (the read model keeps
   * the newest version, history entries are keyed by version).
   */
  const queue: Array<{
    write: NegotiationWrite;
    done: (q: QueuedMessage | null) => void;
    failed: (err: unknown) => void;
  }> = [];
  let writesInFlight = 0;
  /** While the main loop is parked: what it waits for. Null while it runs (it writes for itself). */
  let loopWaitsFor: (() => boolean) | null = null;

  /** The state the search attribute shows: upserted only when it changes (each upsert costs the server a visibility write). */
  let indexedState: NegotiationState | null = null;

  function queueWrite(write: Omit<NegotiationWrite, 'snapshot'>): Promise<QueuedMessage | null> {
    if (state !== indexedState) {
      upsertSearchAttributes([{ key: STATE_KEY, value: state }]);
      indexedState = state;
    }
    const full = { ...write, snapshot: snapshot() };
    return new Promise((done, failed) => queue.push({ write: full, done, failed }));
  }

  async function writeQueued() {
    writesInFlight++;
    const batch = queue.splice(0);
    try {
      const queued = await recordNegotiationWrites(batch.map((b) => b.write));
      recorded += batch.length;
      batch.forEach((b, i) => b.done(queued[i] ?? null));
    } catch (err) {
      // Only a cancelled workflow gets here (the activity retries until it succeeds).
      batch.forEach((b) => b.failed(err));
    } finally {
      writesInFlight--;
    }
  }

  /** The main loop parks on `until` (or on an activity: `() => false`) while `work` runs. */
  async function parked<T>(until: () => boolean, work: () => Promise<T>): Promise<T> {
    loopWaitsFor = until;
    try {
      return await work();
    } finally {
      loopWaitsFor = null;
    }
  }
  const parkedOn = (until: () => boolean, timeout?: Duration) =>
    parked(until, () =>
      timeout === undefined ? condition(until).then(() => true) : condition(until, timeout),
    );

  /** The main loop's write: queued, then written with whatever handlers queued before it. */
  async function writeNow(write: Omit<NegotiationWrite, 'snapshot'>): Promise<QueuedMessage | null> {
    const written = queueWrite(write);
    await writeQueued();
    return written;
  }

  const stateWrite = (entry: Omit<HistoryEntry, 'at' | 'state'>, kind?: 'operator.decision') => ({
    entry: { at: now(), state, ...entry },
    ...(kind ? { kind } : {}),
  });
  /** The main loop records a state change it made. */
  const record = (entry: Omit<HistoryEntry, 'at' | 'state'>) => writeNow(stateWrite(entry));
  const note = (text: string) =>
    record({ message_type: null, direction: 'internal', evidence_id: null, note: text });
  /**
   * Records a change with the next write: an Update handler's (the main loop's answer to it goes
   * in the same activity), or one nobody waits for.
   */
  const recordChange = (entry: Omit<HistoryEntry, 'at' | 'state'>, kind?: 'operator.decision') =>
    queueWrite(stateWrite(entry, kind));

  /** Our message to the counterparty, as an outbox row (its evidence id chosen here, so retries append once). */
  const outbound = (messageType: string, path: string, body: Record<string, unknown>): OutboundMessage => ({
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
    parked(
      () => false,
      () => enqueueProtocolMessage(outbound(messageType, path, body)),
    );

  /** Records the state (already moved) with our outbound message, which goes to the outbox. */
  async function recordSend(messageType: string, path: string, body: Record<string, unknown>) {
    const queued = await writeNow({
      entry: {
        at: now(),
        state,
        message_type: messageType,
        direction: 'outbound',
        evidence_id: null,
        note: null,
      },
      message: outbound(messageType, path, body),
    });
    return queued!;
  }

  /** Ends the negotiation on our side for `reason`; the counterparty is told with `code`. */
  async function terminate(code: string, reason: string) {
    state = 'TERMINATED';
    error = reason;
    ourTermination = { code, reason: [reason] };
    await note(reason);
  }

  /**
   * Records and sends one message of ours (the state already moved): the peer's answer is
   * accepted even if it arrives before our delivery returns. A message that cannot be
   * delivered ends the negotiation, and the counterparty is told (it may be back by then, and
   * would otherwise wait for a message that never comes).
   */
  async function send(messageType: string, path: string, body: Record<string, unknown>) {
    const { outboxId } = await recordSend(messageType, path, body);
    const result = await parked(
      () => false,
      () => deliverFromOutbox(outboxId, input.retry),
    );
    if (!result.delivered) {
      if (!isTerminal(state)) await terminate('delivery_failed', result.error);
      // FINALIZED is ours to send and stays; the operator sees that the consumer may not know.
      else if (state === 'FINALIZED') {
        error = result.error;
        await note(`the ${messageType} was not delivered: ${result.error}`);
      }
    }
    return result;
  }

  async function transitionAndSend(
    to: NegotiationState,
    messageType: string,
    path: string,
    body: Record<string, unknown>,
  ) {
    state = to;
    return send(messageType, path, body);
  }

  /** The counterparty's process id as far as we know it (a consumer learns the providerPid from the provider). */
  const theirPid = () => (role === 'provider' ? input.consumerPid : providerPid);
  // Pids are IRIs: keep ':' readable, escape what would change the path.
  const peerPath = (suffix: string) =>
    `negotiations/${encodeURIComponent(theirPid() ?? '').replace(/%3A/gi, ':')}/${suffix}`;

  /** Why a message names other processes than this one, or null. */
  function pidProblem(body: Record<string, unknown>): string | null {
    const ours = role === 'provider' ? body.providerPid : body.consumerPid;
    if (ours !== undefined && ours !== input.id)
      return `the message names ${JSON.stringify(ours)} as our process, which is ${input.id}`;
    const theirs = role === 'provider' ? body.consumerPid : body.providerPid;
    const known = theirPid();
    if (known !== null && theirs !== undefined && theirs !== known)
      return `the message names ${JSON.stringify(theirs)} as the ${peer}'s process, which is ${known}`;
    return null;
  }

  /** Why an offer in a counter-request or counter-offer does not belong to this negotiation, or null. */
  function offerProblem(message: InboundMessage): string | null {
    const asked = message.body.offer as OdrlOffer | undefined;
    if (!asked) return null;
    if (asked.target !== undefined && input.datasetId !== null && asked.target !== input.datasetId)
      return `the offer's target ${String(asked.target)} is not the dataset of this negotiation (${input.datasetId})`;
    // A counter-request refers to an offer made in this negotiation (by id; by value it may change the rules).
    if (role === 'provider' && state !== 'INITIAL' && !offers.has(asked['@id']))
      return `offer ${asked['@id']} is not part of this negotiation`;
    return null;
  }

  // So that the Temporal UI can list and filter negotiations (registered at dev-server start).
  upsertSearchAttributes([
    { key: PROCESS_KEY, value: 'negotiation' },
    { key: ROLE_KEY, value: role },
    { key: COUNTERPARTY_KEY, value: input.counterpartyDid },
  ]);
  setHandler(ackQuery, ack);
  // Writes what Update handlers queued, once the main loop is parked (see the queue above).
  void (async () => {
    for (;;) {
      await condition(() => queue.length > 0 && loopWaitsFor !== null && !loopWaitsFor());
      void writeQueued();
    }
  })();
  setHandler(startedUpdate, async () => {
    await condition(() => recorded >= 1);
    return ack();
  });

  /** A request, counter-request or counter-offer: the offer in force afterwards. */
  function takeOffer(message: InboundMessage) {
    const asked = message.body.offer as OdrlOffer;
    if (role === 'consumer') {
      // The provider's offer (initial or counter): its rules are what an agreement must carry.
      currentOffer = { ...asked, '@type': 'Offer' };
      offers.set(asked['@id'], currentOffer);
      return;
    }
    // Provider: the request names one of our offers; rules given by value that differ from it
    // are the consumer's proposal, which only an operator can accept.
    const referenced = offers.get(asked['@id']) ?? input.offer;
    termsDiffer = hasRules(asked) && !sameRules(asked, referenced);
    currentOffer = termsDiffer
      ? { ...asked, '@type': 'Offer', target: input.datasetId ?? referenced.target }
      : referenced;
  }

  setHandler(
    dspMessageUpdate,
    async (message: InboundMessage) => {
      const id = messageKey(message);
      if (id !== null) {
        if (received.has(id)) return received.get(id)!;
        if (inFlight.has(id)) {
          await condition(() => received.has(id) || !inFlight.has(id));
          const earlier = received.get(id);
          if (earlier) return earlier;
          throw refuse(ILLEGAL_TRANSITION, 'the same message failed a moment ago');
        }
        inFlight.add(id);
      }
      try {
        if (isHarmlessRepeat(state, message.kind, peer)) return ack();
        const to = nextNegotiationState(state, message.kind, peer)!;
        if (message.kind === 'ContractAgreementMessage') {
          agreement = (message.body.agreement as Record<string, unknown>) ?? null;
          providerPid ??= String(message.body.providerPid);
        }
        if (message.kind === 'ContractOfferMessage') {
          providerPid ??= String(message.body.providerPid);
          takeOffer(message);
          // A (counter-)offer is decided anew.
          approval = null;
          decision = null;
        }
        if (message.kind === 'ContractRequestMessage') {
          takeOffer(message);
          // A counter-request is decided as a new request.
          approval = null;
          decision = null;
        }
        if (message.kind === 'ContractNegotiationTerminationMessage') {
          error = counterpartyError(message.body.code, message.body.reason, 'terminated by the counterparty');
          // A request or offer still waiting for our operator is not awaiting anything any more.
          if (approval === 'pending') approval = null;
        }
        // The agreement is stored before FINALIZED shows: whoever sees FINALIZED can read the
        // agreement and start a transfer under it at once.
        const storeFailed = to === 'FINALIZED' && agreement ? await storeAgreementOnce('handler') : null;
        state = to;
        await recordChange({
          message_type: message.body['@type'] as string,
          direction: 'inbound',
          evidence_id: message.evidenceId,
          note: null,
        });
        if (state === 'FINALIZED' && agreement) {
          if (storeFailed) {
            error = storeFailed;
            await recordChange({
              message_type: null,
              direction: 'internal',
              evidence_id: null,
              note: storeFailed,
            });
          }
          // A connection's transfer starts by itself (consumer, connection_alias set).
          else await startConnectionTransfer(input, String(agreement['@id']));
        }
        const answer = ack();
        if (id !== null) received.set(id, answer);
        return answer;
      } finally {
        if (id !== null) inFlight.delete(id);
      }
    },
    {
      validator: (message: InboundMessage) => {
        const id = messageKey(message);
        if (id !== null && (received.has(id) || inFlight.has(id))) return;
        if (
          message.kind === 'ContractRequestMessage' &&
          role === 'provider' &&
          state !== 'INITIAL' &&
          message.body.providerPid === undefined
        ) {
          throw refuse(
            ILLEGAL_TRANSITION,
            `a negotiation with consumerPid ${input.consumerPid} exists already (${state}); a counter-request names the providerPid`,
          );
        }
        if (isHarmlessRepeat(state, message.kind, peer)) return;
        if (nextNegotiationState(state, message.kind, peer) === null) {
          throw refuse(
            ILLEGAL_TRANSITION,
            `${message.kind} from the ${peer} is not allowed in state ${state}`,
          );
        }
        const pids = pidProblem(message.body);
        if (pids) throw refuse(PID_MISMATCH, pids);
        const offer = offerProblem(message);
        if (offer) throw refuse(OFFER_MISMATCH, offer);
      },
    },
  );

  setHandler(
    decisionUpdate,
    async (d: OperatorDecision) => {
      decision = d;
      decidedBy = d.by;
      decidedAt = now();
      const holding = holdingMove();
      const awaiting = approval === 'pending';
      if (d.action === 'counter_offer' && d.offer) {
        approval = 'countered';
        currentOffer = { ...d.offer, '@type': 'Offer', target: input.datasetId ?? d.offer.target };
        offers.set(currentOffer['@id'], currentOffer);
        state = 'OFFERED';
        operatorSend = {
          type: 'ContractOfferMessage',
          path: peerPath('offers'),
          body: contractOfferMessage({
            id: `urn:uuid:${uuid4()}`,
            providerPid: input.id,
            consumerPid: input.consumerPid,
            offer: currentOffer,
            context: input.ourContext,
          }),
        };
        await recordChange(
          { message_type: null, direction: 'internal', evidence_id: null, note: `counter-offer by ${d.by}` },
          'operator.decision',
        );
        return ack();
      }
      if (d.action === 'counter_request' && d.offer) {
        approval = 'countered';
        currentOffer = { ...d.offer, '@type': 'Offer', target: input.datasetId ?? d.offer.target };
        state = 'REQUESTED';
        operatorSend = {
          type: 'ContractRequestMessage',
          path: peerPath('request'),
          body: contractRequestMessage({
            id: `urn:uuid:${uuid4()}`,
            providerPid: providerPid ?? '',
            consumerPid: input.consumerPid,
            offer: currentOffer,
            context: input.ourContext,
          }),
        };
        await recordChange(
          {
            message_type: null,
            direction: 'internal',
            evidence_id: null,
            note: `counter-request by ${d.by}`,
          },
          'operator.decision',
        );
        return ack();
      }
      if (d.action === 'accept') {
        if (awaiting) approval = 'accepted';
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
        await recordChange(
          { message_type: null, direction: 'internal', evidence_id: null, note: `accepted by ${d.by}` },
          'operator.decision',
        );
        return ack();
      }
      if (d.action === 'approve') {
        approval = 'approved';
        approvedIn = state;
        await recordChange(
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
      // Reject, or terminate (which, for a request or offer awaiting us, is a rejection).
      if (awaiting) approval = 'rejected';
      const rejecting = awaiting && !holding;
      const reason =
        d.reason ??
        (rejecting
          ? `rejected by the ${role === 'provider' ? 'provider' : 'consumer'}`
          : 'terminated by the operator');
      ourTermination = { code: rejecting ? 'rejected' : 'terminated', reason: [reason] };
      error = reason;
      state = 'TERMINATED';
      await recordChange(
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
          if (isTerminal(state)) throw refuse(ALREADY_ENDED, `the negotiation has ended (${state})`);
          return;
        }
        if (d.action === 'accept') {
          if (role !== 'consumer' || state !== 'OFFERED')
            throw refuse(NOT_AWAITING_APPROVAL, `there is no offer to accept (${state})`);
          return;
        }
        if ((d.action === 'counter_offer' || d.action === 'counter_request') && !d.offer)
          throw refuse(NOT_AWAITING_APPROVAL, `a ${d.action.replace('_', '-')} needs an offer`);
        if (holdingMove() && d.action !== 'approve')
          throw refuse(
            NOT_AWAITING_APPROVAL,
            `the negotiation awaits approval of our next move (${state}): approve or terminate it`,
          );
        if (d.action === 'counter_request' && (role !== 'consumer' || state !== 'OFFERED'))
          throw refuse(
            NOT_AWAITING_APPROVAL,
            `there is no offer to answer with a counter-request (${state})`,
          );
        if (d.action === 'counter_offer' && role !== 'provider')
          throw refuse(NOT_AWAITING_APPROVAL, 'a consumer answers an offer with a counter-request');
        if (role !== 'provider' && d.action === 'approve' && !holdingMove())
          throw refuse(NOT_AWAITING_APPROVAL, 'a consumer accepts, rejects or terminates an offer');
        if (approval !== 'pending' || decision !== null || isTerminal(state)) {
          throw refuse(
            NOT_AWAITING_APPROVAL,
            approval === 'expired'
              ? 'the request expired before a decision'
              : 'the negotiation is not awaiting approval',
          );
        }
      },
    },
  );

  let agreementStored = false;
  /**
   * Stores the agreement once; returns why it could not be stored, or null. `from` says who
   * asks: the main loop runs it as a local activity, an Update handler as a normal one.
   */
  async function storeAgreementOnce(from: 'loop' | 'handler'): Promise<string | null> {
    if (agreementStored || !agreement) return null;
    try {
      await (from === 'loop' ? storeAgreementLocally : storeAgreement)({
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
      agreementStored = true;
      return null;
    } catch (err) {
      const cause = err instanceof ActivityFailure ? err.cause : err;
      return `the agreement could not be stored: ${cause instanceof Error ? cause.message : String(cause)}`;
    }
  }

  /**
   * Waits for the counterparty (or an operator) to move us on from `from`; after the deadline
   * the negotiation ends and the counterparty is told. Our own decisions have their own deadline.
   */
  async function awaitCounterparty(from: NegotiationState) {
    const moved = await parkedOn(() => state !== from, input.responseTimeoutMs);
    if (!moved)
      await terminate(
        'timeout',
        `the ${peer} did not answer within ${Math.round(input.responseTimeoutMs / 1000)} s (${from})`,
      );
  }

  /**
   * Waits for our operator's decision until APPROVAL_DEADLINE: on a request (provider) or an
   * offer (consumer), or, stepwise, on our next `move`. Expired, the negotiation ends and the
   * counterparty is told.
   */
  async function awaitOperator(from: NegotiationState, what: 'request' | 'offer' | { move: string }) {
    approval = 'pending';
    decision = null;
    expiresAt = new Date(Date.now() + input.approvalTimeoutMs).toISOString();
    await note(
      typeof what === 'object'
        ? `awaiting approval to ${what.move}`
        : `awaiting ${role === 'provider' ? 'approval' : 'acceptance'}`,
    );
    const decided = await parkedOn(() => decision !== null || state !== from, input.approvalTimeoutMs);
    if (decided) return;
    approval = 'expired';
    if (typeof what === 'object')
      await terminate('approval_expired', `no operator approved to ${what.move} before the deadline`);
    else
      await terminate(
        `${what}_expired`,
        `the ${what} expired before an operator ${role === 'provider' ? 'approved' : 'accepted'} it`,
      );
  }

  if (role === 'consumer' && initiatedBy === 'consumer') {
    const request = contractRequestMessage({
      id: `urn:uuid:${uuid4()}`,
      consumerPid: input.consumerPid,
      callbackAddress: input.ourAddress,
      offer: input.offer,
      context: input.ourContext,
    });
    const sent = await transitionAndSend(
      'REQUESTED',
      'ContractRequestMessage',
      'negotiations/request',
      request,
    );
    const answer = sent.delivered ? (sent.body as { providerPid?: unknown } | null) : null;
    if (typeof answer?.providerPid === 'string' && answer.providerPid !== '' && providerPid === null) {
      providerPid = answer.providerPid;
      // Written with our next write (or alone once we wait): nothing waits for it, and the
      // provider's agreement may already be here, to be answered in the same activity.
      void recordChange({
        message_type: 'ContractNegotiation',
        direction: 'inbound',
        evidence_id: null,
        note: 'request acknowledged',
      });
    }
  } else {
    // The first message (a request to us as provider, an offer to us as consumer) arrived with
    // the start (update-with-start); without it there is nothing to negotiate.
    if (!(await parkedOn(() => state !== 'INITIAL', '1 minute'))) return ack();
  }

  while (!isTerminal(state)) {
    const current = currentState();
    if (operatorSend) {
      const m: { type: string; path: string; body: Record<string, unknown> } = operatorSend;
      operatorSend = null;
      await send(m.type, m.path, m.body);
      continue;
    }
    if (role === 'provider' && (current === 'REQUESTED' || current === 'ACCEPTED')) {
      if (
        current === 'REQUESTED' &&
        (input.approval !== 'automatic' || termsDiffer) &&
        approval !== 'approved'
      ) {
        await awaitOperator(current, 'request');
        continue;
      }
      if (heldAt(current)) {
        await awaitOperator(current, { move: 'agree' });
        continue;
      }
      agreement = {
        '@id': `urn:uuid:${uuid4()}`,
        '@type': 'Agreement',
        target: input.datasetId ?? currentOffer.target,
        assigner: input.ourDid,
        assignee: input.counterpartyDid,
        timestamp: now(),
        // An Agreement's rules have no target; empty lists are left out (the DSP schema).
        ...wireRules(currentOffer),
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
          context: input.ourContext,
        }),
      );
    } else if (role === 'provider' && current === 'VERIFIED') {
      if (heldAt(current)) {
        await awaitOperator(current, { move: 'finalize' });
        continue;
      }
      // Not parked: the loop writes next (FINALIZED or the termination), together with the
      // VERIFIED the handler queued, so the consumer's verification is answered after one write.
      const failed = await storeAgreementOnce('loop');
      // A termination may have arrived meanwhile: it wins, nothing is finalized.
      if (currentState() !== current) continue;
      if (failed) {
        await terminate('agreement_not_stored', failed);
        continue;
      }
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
      // We verify what we asked for, not just any agreement (dsp-edc.md §1.4).
      const problems = agreementProblems(agreement ?? {}, {
        target: input.datasetId ?? text(currentOffer.target),
        assignee: input.ourDid,
        assigner: input.counterpartyId ?? input.counterpartyDid,
        offer: currentOffer,
      });
      if (problems.length > 0) {
        await terminate(
          'agreement_mismatch',
          `the agreement does not match the offer: ${problems.join('; ')}`,
        );
        continue;
      }
      // Stepwise: an agreement that passes our checks still waits for the operator's approval.
      if (heldAt(current)) {
        await awaitOperator(current, { move: 'verify the agreement' });
        continue;
      }
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
    } else if (role === 'consumer' && current === 'OFFERED') {
      await awaitOperator(current, 'offer');
      // Accepted: the acceptance is sent above; else the state moved or it expired.
    } else {
      // Our move is done; the counterparty's message (or an operator) moves us on.
      await awaitCounterparty(current);
    }
  }

  if (ourTermination) {
    const t: { code: string; reason: string[] } = ourTermination;
    if (theirPid() === null) {
      // A consumer whose request was never acknowledged has no address for the provider's process.
      await note('the termination was not sent: the provider never told us its process id');
    } else {
      // Best effort: the counterparty learns why; an undeliverable termination changes nothing here.
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
      const sent = await parked(
        () => false,
        () => deliverFromOutbox(outboxId, input.retry),
      );
      await record({
        message_type: 'ContractNegotiationTerminationMessage',
        direction: 'outbound',
        evidence_id: evidenceId,
        note: sent.delivered ? null : sent.error,
      });
    }
  }

  // Let Update handlers that moved us here finish (their callers are waiting for the answer),
  // and write what is still queued.
  await parkedOn(() => allHandlersFinished() && queue.length === 0 && writesInFlight === 0);
  return ack();
}

const text = (v: unknown): string | null => (typeof v === 'string' ? v : null);

/** A message's identity for repeats: its @id, per message type (an @id is only unique per sender). */
const messageKey = (m: InboundMessage): string | null =>
  m.messageId === null ? null : `${m.kind} ${m.messageId}`;
