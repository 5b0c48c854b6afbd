/**
 * One transfer process, in either role (DSP 2025-1), and the end of an agreement.
 *
 * Inbound messages and operator actions arrive as Updates whose validators consult the
 * transition table in domain/transfer.ts; a handler moves the state, does what must happen at
 * once (revoke or issue a pull token, record the move) and queues our message; the main loop
 * delivers queued messages through the outbox and, as consumer, renews the data address before
 * its token expires.
 */
import {
  ActivityFailure,
  ApplicationFailure,
  ParentClosePolicy,
  allHandlersFinished,
  condition,
  continueAsNew,
  getExternalWorkflowHandle,
  patched,
  proxyActivities,
  setHandler,
  startChild,
  upsertSearchAttributes,
  uuid4,
  workflowInfo,
} from '@temporalio/workflow';
import { defineSearchAttributeKey } from '@temporalio/common';
import type { TransferActivities } from '../activities/transfer.js';
import type { DataAddress } from '../gateway/dataplane/access.js';
import type { TransferHistoryEntry, TransferSnapshot } from '../db/transfers.js';
import { counterpartyError, otherParty } from '../domain/negotiation.js';
import {
  DEFAULT_FORMAT,
  actionTarget,
  agreementTerminationMessage,
  isHarmlessTransferRepeat,
  isTransferEnded,
  nextTransferState,
  renewalDueAt,
  transferMessage,
  transferRequestMessage,
  TRANSFER_ACTIONS,
  type TransferMessage,
  type TransferState,
} from '../domain/transfer.js';
import { dspUrl } from '../domain/dsp.js';
import { deliverFromOutbox } from './outbox-delivery.js';
import type { NegotiationInput } from './negotiation-messages.js';
import {
  AGREEMENT_ENDED,
  ILLEGAL_TRANSFER_TRANSITION,
  RENEWAL_REFUSED,
  agreementEndedSignal,
  connectionSupersededSignal,
  endAgreementUpdate,
  transferAckQuery,
  transferDecisionUpdate,
  transferMessageUpdate,
  transferStartedUpdate,
  type AgreementEndAck,
  type AgreementEnded,
  type ConnectionSuperseded,
  type AgreementTerminationInput,
  type EndAgreement,
  type InboundTransferMessage,
  type TransferAck,
  type TransferCarry,
  type TransferDecision,
  type TransferInput,
} from './transfer-messages.js';

const activities = proxyActivities<TransferActivities>({
  startToCloseTimeout: '10 seconds',
  retry: { initialInterval: '100 ms', maximumInterval: '5 seconds' },
});
const { issueTransferToken } = proxyActivities<TransferActivities>({
  startToCloseTimeout: '10 seconds',
  retry: {
    initialInterval: '100 ms',
    maximumInterval: '5 seconds',
    maximumAttempts: 20,
    nonRetryableErrorTypes: [AGREEMENT_ENDED],
  },
});
// A renewal that keeps failing is given up for a while; the token stays valid until it expires.
const { renewDataAddress } = proxyActivities<TransferActivities>({
  startToCloseTimeout: '15 seconds',
  retry: {
    initialInterval: '1 second',
    maximumInterval: '10 seconds',
    maximumAttempts: 4,
    nonRetryableErrorTypes: [RENEWAL_REFUSED],
  },
});

const STATE_KEY = defineSearchAttributeKey('ConnectorState', 'KEYWORD');
const PROCESS_KEY = defineSearchAttributeKey('ConnectorProcess', 'KEYWORD');
const ROLE_KEY = defineSearchAttributeKey('ConnectorRole', 'KEYWORD');
const COUNTERPARTY_KEY = defineSearchAttributeKey('Counterparty', 'KEYWORD');

/** Where each message goes below the counterparty's DSP base (`transfers/{their pid}/...`). */
const PATH_SUFFIX: Record<Exclude<TransferMessage, 'TransferRequestMessage'>, string> = {
  TransferStartMessage: 'start',
  TransferSuspensionMessage: 'suspension',
  TransferCompletionMessage: 'completion',
  TransferTerminationMessage: 'termination',
};

/** A message of ours waiting for the main loop to send it. */
interface Outgoing {
  type: Exclude<TransferMessage, 'TransferRequestMessage'>;
  code?: string;
  reason?: string[];
  /** Provider's start: the data address with its token. */
  dataAddress?: DataAddress;
}

/** A property of a data address; a peer's address may have none (`endpointProperties` is optional in DSP). */
const property = (a: DataAddress | null, name: string) =>
  a?.endpointProperties?.find((p) => p.name === name)?.value;

/**
 * A peer's data address as the consumer keeps it: `endpointProperties` always a list (DSP lets
 * a peer leave it out), so that every reader of the stored address may rely on it.
 */
const receivedAddress = (a: DataAddress | undefined): DataAddress | null =>
  a ? { ...a, endpointProperties: a.endpointProperties ?? [] } : null;

/** The data address as the provider's read model keeps it: the token is the consumer's, not ours to store. */
const withoutToken = (a: DataAddress): DataAddress => ({
  ...a,
  endpointProperties: (a.endpointProperties ?? []).map((p) =>
    p.name === 'authorization' ? { ...p, value: '\u2022'.repeat(6) } : p,
  ),
});

const illegal = (message: string) =>
  ApplicationFailure.create({ type: ILLEGAL_TRANSFER_TRANSITION, message, nonRetryable: true });

/** Inbound message ids a run hands to the next (a peer repeats a message within moments, not days). */
const CARRIED_MESSAGE_IDS = 200;
/** Without TRANSFER_HISTORY_LIMIT: Temporal's suggestion, or at the latest this many events. */
const DEFAULT_HISTORY_LIMIT = 10_000;

const failureMessage = (err: unknown): string => {
  const cause = err instanceof ActivityFailure ? err.cause : err;
  return cause instanceof Error ? cause.message : String(cause);
};

export async function transfer(input: TransferInput): Promise<TransferAck> {
  const { role } = input;
  const peer = otherParty(role);
  // Changed by handlers too: read through `currentState()` where TypeScript would narrow it.
  let state = 'INITIAL' as TransferState;
  const currentState = (): TransferState => state;
  let providerPid = input.providerPid;
  let version = 0;
  let recorded = 0;
  let error: string | null = null;
  /** Consumer: the address with its token. Provider: the address last sent, token masked. */
  let dataAddress: DataAddress | null = null;
  let addressReceivedAt = 0;
  /** Bumped whenever the data address changes, so that a renewal timer starts over. */
  let addressVersion = 0;
  let renewalBlocked = false;
  let renewalRetryAt: number | null = null;
  let flowState: string | null = null;
  /** Provider: tokens issued so far (each issue has its own key). */
  let issued = 0;
  /** Provider: the initial request asks for our first start. */
  let firstStartDue = false;
  /** Provider, stepwise: the first start waits for an operator's `start`. */
  let awaitingStart = false;
  const outgoing: Outgoing[] = [];
  const received = new Map<string, TransferAck>();
  const now = () => new Date().toISOString();
  const ack = (): TransferAck => ({ state, providerPid, consumerPid: input.consumerPid });

  // A run that continues an earlier one (continueAsNew): its request and first start are behind it.
  const carried = input.carried ?? null;
  if (carried) {
    ({ state, providerPid, version, error, dataAddress, addressReceivedAt, flowState, issued } = carried);
    ({ renewalBlocked, renewalRetryAt } = carried);
    for (const [id, answer] of carried.received) received.set(id, answer);
    recorded = 1;
    upsertSearchAttributes([{ key: STATE_KEY, value: state }]);
  }

  /** The state this run hands to the next one. */
  const carry = (): TransferCarry => ({
    state,
    providerPid,
    version,
    error,
    dataAddress,
    addressReceivedAt,
    renewalBlocked,
    renewalRetryAt,
    flowState,
    issued,
    received: [...received].slice(-CARRIED_MESSAGE_IDS),
  });

  /** Whether this run's history is long enough to hand over to a fresh run. */
  const historyFull = () => {
    const info = workflowInfo();
    return info.continueAsNewSuggested || info.historyLength >= (input.historyLimit ?? DEFAULT_HISTORY_LIMIT);
  };

  function snapshot(): TransferSnapshot {
    return {
      id: input.id,
      workflow_id: workflowInfo().workflowId,
      role,
      state,
      consumer_pid: input.consumerPid,
      provider_pid: providerPid,
      agreement_id: input.agreementId,
      counterparty_did: input.counterpartyDid,
      counterparty_address: input.counterpartyAddress,
      dataset_id: input.datasetId,
      format: input.format,
      connection_alias: input.connectionAlias,
      error,
      data_address: dataAddress,
      // The data plane serving this transfer: ours as provider, the provider's as consumer.
      dataplane_id: role === 'provider' ? input.ourDid : input.counterpartyDid,
      dataplane_endpoint: role === 'provider' ? input.dataplaneEndpoint : (dataAddress?.endpoint ?? null),
      delegation_id: null,
      flow_state: flowState,
      version: ++version,
    };
  }

  async function record(
    entry: Omit<TransferHistoryEntry, 'at' | 'state'>,
    kind?: 'operator.decision',
  ): Promise<void> {
    upsertSearchAttributes([{ key: STATE_KEY, value: state }]);
    await activities.recordTransfer(snapshot(), { at: now(), state, ...entry }, kind);
    recorded++;
  }

  const note = (text: string) => ({
    message_type: null,
    direction: 'internal' as const,
    evidence_id: null,
    note: text,
  });

  const peerPath = (suffix: string) =>
    role === 'provider'
      ? `transfers/${input.consumerPid}/${suffix}`
      : `transfers/${providerPid ?? ''}/${suffix}`;

  /** Records the current state with our outbound message and queues it, in one activity. */
  async function recordSend(type: string, path: string, body: Record<string, unknown>) {
    upsertSearchAttributes([{ key: STATE_KEY, value: state }]);
    const queued = await activities.recordTransferAndEnqueue(
      snapshot(),
      { at: now(), state, message_type: type, direction: 'outbound', note: null },
      {
        process_id: input.id,
        kind: 'transfer',
        message_type: type,
        counterparty_did: input.counterpartyDid,
        url: dspUrl(input.counterpartyAddress, path),
        body,
        evidence_id: `ev_${uuid4()}`,
      },
    );
    recorded++;
    return queued;
  }

  /** Provider: every token of this transfer stops working. */
  async function revoke() {
    if (role !== 'provider') return;
    await activities.revokeTransferToken(input.id);
  }

  /** Leaves the data plane side of a state we moved to: tokens revoked, address dropped. */
  async function stopFlow(to: TransferState) {
    flowState = to === 'SUSPENDED' ? 'suspended' : to === 'COMPLETED' ? 'completed' : 'terminated';
    if (role === 'consumer') {
      dataAddress = null;
      addressVersion++;
    }
    await revoke();
  }

  /**
   * Provider: issues a fresh token and queues our TransferStartMessage carrying it (first start
   * and every resume). A state that moved on meanwhile gets the token revoked again.
   */
  async function startFlow(expected: TransferState) {
    const issueKey = `${input.id}/start/${++issued}`;
    let address: DataAddress;
    try {
      address = await issueTransferToken({
        transferId: input.id,
        agreementId: input.agreementId,
        consumerDid: input.counterpartyDid,
        endpoint: input.dataplaneEndpoint ?? '',
        issueKey,
      });
    } catch (err) {
      if (isTransferEnded(state)) return;
      state = 'TERMINATED';
      error = `no access could be given: ${failureMessage(err)}`;
      flowState = 'terminated';
      outgoing.push({ type: 'TransferTerminationMessage', code: 'no_access', reason: [error] });
      await revoke();
      await record(note(error));
      return;
    }
    if (currentState() !== expected) {
      await revoke();
      return;
    }
    state = 'STARTED';
    dataAddress = withoutToken(address);
    flowState = 'started';
    outgoing.push({ type: 'TransferStartMessage', dataAddress: address });
  }

  // So that the Temporal UI can list and filter transfers (registered at dev-server start).
  upsertSearchAttributes([
    { key: PROCESS_KEY, value: 'transfer' },
    { key: ROLE_KEY, value: role },
    { key: COUNTERPARTY_KEY, value: input.counterpartyDid },
  ]);
  setHandler(transferAckQuery, ack);
  setHandler(transferStartedUpdate, async () => {
    await condition(() => recorded >= 1);
    return ack();
  });

  setHandler(
    transferMessageUpdate,
    async (message: InboundTransferMessage) => {
      if (message.messageId && received.has(message.messageId)) return received.get(message.messageId)!;
      // A repeated request (same consumer, same consumerPid) or a repeated final message: no effect.
      if (message.kind === 'TransferRequestMessage' && state !== 'INITIAL') return ack();
      if (isHarmlessTransferRepeat(state, message.kind)) return ack();
      const from = state;
      const to = nextTransferState(from, message.kind, peer)!;
      state = to;
      const body = message.body;
      if (role === 'consumer' && typeof body.providerPid === 'string') providerPid ??= body.providerPid;
      if (message.kind === 'TransferTerminationMessage') {
        error = counterpartyError(body.code, body.reason, 'terminated by the counterparty');
      }
      if (message.kind === 'TransferStartMessage' && role === 'consumer') {
        dataAddress = receivedAddress(body.dataAddress as DataAddress | undefined);
        addressReceivedAt = Date.now();
        addressVersion++;
        renewalBlocked = false;
        renewalRetryAt = null;
        flowState = dataAddress ? 'ready' : 'no_address';
      }
      const inbound = {
        message_type: message.kind,
        direction: 'inbound' as const,
        evidence_id: message.evidenceId,
        // A suspension's code and reasons are for the operator to see; it is no error.
        note:
          message.kind === 'TransferSuspensionMessage'
            ? counterpartyError(body.code, body.reason, '') || null
            : null,
      };
      if (isTransferEnded(to) || to === 'SUSPENDED') await stopFlow(to);
      await record(inbound);
      // Our start follows the answer to the request (which says REQUESTED).
      if (message.kind === 'TransferRequestMessage') firstStartDue = true;
      // The consumer resumed: it needs a fresh token, which our start message carries.
      if (role === 'provider' && message.kind === 'TransferStartMessage') {
        await startFlow('STARTED');
        await record(note('resumed by the consumer; fresh token issued'));
      }
      const answer = ack();
      if (message.messageId) received.set(message.messageId, answer);
      return answer;
    },
    {
      validator: (message: InboundTransferMessage) => {
        if (message.messageId && received.has(message.messageId)) return;
        if (message.kind === 'TransferRequestMessage' && role === 'provider' && state !== 'INITIAL') return;
        if (isHarmlessTransferRepeat(state, message.kind)) return;
        if (nextTransferState(state, message.kind, peer) === null)
          throw illegal(`${message.kind} from the ${peer} is not allowed in state ${state}`);
      },
    },
  );

  setHandler(
    transferDecisionUpdate,
    async (d: TransferDecision) => {
      const to = actionTarget(state, d.action, role)!;
      state = to;
      const reason = d.reason ?? `${d.action} by the ${role}'s operator`;
      if (d.action === 'terminate') error = reason;
      const decided = note(`${d.action} by ${d.by}`);
      if (to === 'STARTED') {
        // Start (provider, stepwise) or resume. As provider: a fresh token in our start message;
        // as consumer: our start, and the provider's start brings the fresh data address.
        if (role === 'provider') {
          await record(decided, 'operator.decision');
          await startFlow('STARTED');
          if (currentState() === 'STARTED') await record(note('fresh token issued'));
          return ack();
        }
        flowState = 'awaiting_address';
        outgoing.push({ type: 'TransferStartMessage' });
      } else {
        // Queued before anything is awaited: the main loop must not see an ended transfer with nothing to send.
        outgoing.push({
          type: TRANSFER_ACTIONS[d.action],
          ...(d.action === 'terminate' || d.action === 'suspend'
            ? { code: d.action === 'terminate' ? 'terminated' : 'suspended', reason: [reason] }
            : {}),
        });
        await stopFlow(to);
      }
      await record(decided, 'operator.decision');
      return ack();
    },
    {
      validator: (d: TransferDecision) => {
        if (actionTarget(state, d.action, role) === null)
          throw illegal(`a ${state.toLowerCase()} transfer cannot ${d.action}`);
        if (d.action === 'start' && !awaitingStart)
          throw illegal('the transfer does not wait for an operator: its provider starts it by itself');
      },
    },
  );

  setHandler(connectionSupersededSignal, async (c: ConnectionSuperseded) => {
    // As an operator's terminate would: tell the provider, revoke nothing of ours (consumer).
    if (actionTarget(state, 'terminate', role) === null) return;
    state = 'TERMINATED';
    error = `connection '${c.alias}' is served by transfer ${c.by} now`;
    outgoing.push({ type: 'TransferTerminationMessage', code: 'superseded', reason: [error] });
    await stopFlow('TERMINATED');
    await record(note(error));
  });

  setHandler(agreementEndedSignal, async (e: AgreementEnded) => {
    if (isTransferEnded(state)) return;
    state = 'TERMINATED';
    error = `the agreement was ended by the ${e.endedBy}${e.reason ? `: ${e.reason}` : ''}`;
    await stopFlow('TERMINATED');
    await record(note(error));
  });

  /**
   * Delivers our queued messages in order. One that cannot be delivered ends the transfer, and
   * the counterparty is told (best effort, as a negotiation does): a peer that refused one
   * message, or was away for the whole retry period, may well take the termination.
   */
  async function deliverNext() {
    const o = outgoing.shift()!;
    if (role === 'consumer' && providerPid === null) {
      // The provider never acknowledged our request: there is no process to tell.
      await record(note(`${o.type} not sent: the provider never acknowledged the request`));
      return;
    }
    const body = transferMessage(o.type, {
      id: `urn:uuid:${uuid4()}`,
      providerPid: providerPid ?? '',
      consumerPid: input.consumerPid,
      dataAddress: o.dataAddress ?? null,
      code: o.code ?? null,
      reason: o.reason ?? [],
    });
    const { outboxId } = await recordSend(o.type, peerPath(PATH_SUFFIX[o.type]), body);
    const result = await deliverFromOutbox(outboxId, input.retry);
    if (!result.delivered && !isTransferEnded(state)) {
      state = 'TERMINATED';
      error = result.error;
      outgoing.push({
        type: 'TransferTerminationMessage',
        code: 'delivery_failed',
        reason: [`our ${o.type} was not delivered: ${result.error}`],
      });
      await stopFlow('TERMINATED');
      await record(note(result.error));
    }
  }

  /**
   * Consumer: when the data address needs renewing, or null when there is nothing to renew: an
   * address without a token expiry or a refresh endpoint is used as it is, never renewed.
   */
  function renewalDue(): number | null {
    if (role !== 'consumer' || state !== 'STARTED' || !dataAddress || renewalBlocked) return null;
    if (!property(dataAddress, 'refreshEndpoint')) return null;
    if (renewalRetryAt !== null) return renewalRetryAt;
    const expiresAt = Date.parse(property(dataAddress, 'expiresAt') ?? '');
    return Number.isNaN(expiresAt) ? null : renewalDueAt(addressReceivedAt, expiresAt);
  }

  /** Consumer: renews the token; the old one keeps working until the new one is used. */
  async function renew() {
    const before = addressVersion;
    const current = dataAddress!;
    try {
      const fresh = await renewDataAddress(current);
      if (addressVersion !== before || currentState() !== 'STARTED') return;
      dataAddress = fresh;
      addressReceivedAt = Date.now();
      addressVersion++;
      renewalRetryAt = null;
      flowState = 'ready';
      await record(note('data address renewed'));
    } catch (err) {
      if (addressVersion !== before || currentState() !== 'STARTED') return;
      const refused =
        err instanceof ActivityFailure &&
        err.cause instanceof ApplicationFailure &&
        err.cause.type === RENEWAL_REFUSED;
      const expiresAt = Date.parse(property(current, 'expiresAt') ?? '');
      // Try again a while later unless the provider refused the token or it has expired.
      renewalBlocked = refused || !(expiresAt > Date.now());
      renewalRetryAt = renewalBlocked ? null : Math.min(Date.now() + 30_000, expiresAt);
      flowState = 'renewal_failed';
      await record(note(`renewing the data address failed: ${failureMessage(err)}`));
    }
  }

  /**
   * Provider, stepwise: our first start waits in REQUESTED for an operator's `start` (the
   * decision handler starts it) or a termination, until the approval deadline.
   */
  async function awaitStart(timeoutMs: number) {
    awaitingStart = true;
    flowState = 'awaiting_start';
    await record(note("awaiting an operator's start"));
    const decided = await condition(() => state !== 'REQUESTED', timeoutMs);
    awaitingStart = false;
    if (decided) return;
    state = 'TERMINATED';
    error = 'no operator started the transfer before the deadline';
    flowState = 'terminated';
    outgoing.push({ type: 'TransferTerminationMessage', code: 'approval_expired', reason: [error] });
    await record(note(error));
  }

  if (carried) {
    // Continued: nothing to request or wait for.
  } else if (role === 'consumer') {
    state = 'REQUESTED';
    const request = transferRequestMessage({
      id: `urn:uuid:${uuid4()}`,
      consumerPid: input.consumerPid,
      agreementId: input.agreementId,
      format: input.format,
      callbackAddress: input.ourAddress,
    });
    const { outboxId } = await recordSend('TransferRequestMessage', 'transfers/request', request);
    const sent = await deliverFromOutbox(outboxId, input.retry);
    const answer = sent.delivered ? (sent.body as { providerPid?: unknown } | null) : null;
    if (!sent.delivered && !isTransferEnded(state)) {
      state = 'TERMINATED';
      error = sent.error;
      flowState = 'terminated';
      await record(note(sent.error));
    } else if (typeof answer?.providerPid === 'string' && providerPid === null) {
      providerPid = answer.providerPid;
      await record({
        message_type: 'TransferProcess',
        direction: 'inbound',
        evidence_id: null,
        note: 'request acknowledged',
      });
    }
  } else {
    // The request arrived with the start (update-with-start).
    await condition(() => state !== 'INITIAL');
  }

  while (!(isTransferEnded(state) && outgoing.length === 0)) {
    if (firstStartDue) {
      firstStartDue = false;
      if (currentState() === 'REQUESTED') {
        if (input.startApproval) await awaitStart(input.startApproval.timeoutMs);
        else await startFlow('REQUESTED');
      }
      continue;
    }
    if (outgoing.length > 0) {
      await deliverNext();
      continue;
    }
    const due = renewalDue();
    if (due !== null && due <= Date.now()) {
      await renew();
      continue;
    }
    // Idle, with a long history: hand over to a fresh run once no Update is halfway.
    if (historyFull()) {
      await condition(allHandlersFinished);
      if (outgoing.length > 0 || firstStartDue || isTransferEnded(state)) continue;
      return continueAsNew<typeof transfer>({ ...input, carried: carry() });
    }
    const seen = { state: currentState(), addressVersion, blocked: renewalBlocked };
    await condition(
      () =>
        outgoing.length > 0 ||
        firstStartDue ||
        state !== seen.state ||
        addressVersion !== seen.addressVersion ||
        renewalBlocked !== seen.blocked,
      due === null ? undefined : Math.max(1, due - Date.now()),
    );
  }

  // Let Update handlers that moved us here finish (their callers are waiting for the answer).
  await condition(allHandlersFinished);
  return ack();
}

/**
 * Consumer: the transfer of a connection, started when the negotiation that named it is
 * FINALIZED. A child that outlives its parent (ABANDON); its id comes from the workflow's
 * seeded uuid, so a replay starts nothing new.
 */
export async function startConnectionTransfer(n: NegotiationInput, agreementId: string): Promise<void> {
  if (n.role !== 'consumer' || !n.connectionAlias || !patched('connection-transfer')) return;
  const uuid = uuid4();
  const input: TransferInput = {
    role: 'consumer',
    id: `urn:uuid:${uuid}`,
    consumerPid: `urn:uuid:${uuid}`,
    providerPid: null,
    agreementId,
    datasetId: n.datasetId,
    format: DEFAULT_FORMAT,
    ourDid: n.ourDid,
    ourAddress: n.ourAddress,
    counterpartyDid: n.counterpartyDid,
    counterpartyAddress: n.counterpartyAddress,
    connectionAlias: n.connectionAlias,
    dataplaneEndpoint: null,
    retry: n.retry,
  };
  await startChild(transfer, {
    workflowId: `transfer/consumer/${uuid}`,
    args: [input],
    parentClosePolicy: ParentClosePolicy.ABANDON,
  });
}

/**
 * The end of an agreement on our side, whoever ends it: the agreement is marked ended and its
 * tokens revoked at once (activity), every transfer under it ends, and when we end it, the
 * counterparty is told with an AgreementTerminationMessage through the outbox.
 */
export async function agreementTermination(input: AgreementTerminationInput): Promise<AgreementEndAck> {
  let answer: AgreementEndAck | null = null;
  let notify: EndAgreement | null = null;
  let ending: Promise<AgreementEndAck> | null = null;

  // Ends that cross (two operators at once, or ours and the counterparty's message) are one end:
  // the first one's, whose answer every later one gets. The counterparty is told only when that
  // first end is ours. An end that failed is not kept: the next one tries again. (Runs that began
  // before this ran each end on its own: `patched` keeps their histories replaying.)
  setHandler(endAgreementUpdate, (e: EndAgreement) => {
    if (!patched('agreement-end-shared')) return end(e);
    ending ??= end(e).catch((err: unknown) => {
      ending = null;
      throw err;
    });
    return ending;
  });

  async function end(e: EndAgreement): Promise<AgreementEndAck> {
    if (answer) return answer;
    const endedBy = e.by === 'us' ? input.role : otherParty(input.role);
    const ended = await activities.endAgreement({
      agreementId: input.agreementId,
      endedBy,
      reason: e.reason,
      actor: e.actor,
      messageEvidenceId: e.evidenceId,
    });
    for (const t of ended.running) {
      try {
        await getExternalWorkflowHandle(t.workflow_id).signal(agreementEndedSignal, {
          endedBy: ended.endedBy,
          reason: ended.reason,
        });
      } catch {
        // That transfer's workflow has ended meanwhile: nothing left to stop.
      }
    }
    answer = {
      agreementId: input.agreementId,
      endedAt: ended.endedAt,
      endedBy: ended.endedBy,
      transfers: ended.running.map((t) => t.id),
    };
    if (e.by === 'us') notify = e;
    return answer;
  }

  await condition(() => answer !== null);
  if (notify && input.counterpartyAddress) {
    const e: EndAgreement = notify;
    const body = agreementTerminationMessage({
      id: `urn:uuid:${uuid4()}`,
      agreementId: input.agreementId,
      code: e.code,
      reason: e.reason ? [e.reason] : [],
    });
    const { outboxId } = await activities.enqueueTransferMessage({
      process_id: input.agreementId,
      kind: 'agreement',
      message_type: 'AgreementTerminationMessage',
      counterparty_did: input.counterpartyDid,
      url: dspUrl(
        input.counterpartyAddress,
        `agreements/${encodeURIComponent(input.agreementId)}/termination`,
      ),
      body,
      evidence_id: `ev_${uuid4()}`,
    });
    // An undeliverable notice stays visible as a dropped outbox row; the agreement has ended here.
    await deliverFromOutbox(outboxId, input.retry);
  }
  await condition(allHandlersFinished);
  return answer!;
}
