/**
 * Transfer process, DSP 2025-1 (dsp-edc.md §1.5): states, messages, and the transition table as
 * data. The workflow consults it to act, its Update validators to refuse, and the management
 * API to say which operator actions a state allows.
 *
 * As in negotiations, a state moves when a message is sent (optimistically) or received; a
 * message that cannot be delivered terminates the transfer.
 */
import type { Party } from './negotiation.js';

export const TRANSFER_STATES = [
  'INITIAL',
  'REQUESTED',
  'STARTED',
  'SUSPENDED',
  'COMPLETED',
  'TERMINATED',
] as const;
export type TransferState = (typeof TRANSFER_STATES)[number];

export const isTransferEnded = (s: TransferState): boolean => s === 'COMPLETED' || s === 'TERMINATED';

export type TransferMessage =
  | 'TransferRequestMessage'
  | 'TransferStartMessage'
  | 'TransferSuspensionMessage'
  | 'TransferCompletionMessage'
  | 'TransferTerminationMessage';

export const TRANSFER_MESSAGES: readonly TransferMessage[] = [
  'TransferRequestMessage',
  'TransferStartMessage',
  'TransferSuspensionMessage',
  'TransferCompletionMessage',
  'TransferTerminationMessage',
];

interface Transition {
  from: TransferState;
  message: TransferMessage;
  sender: Party;
  to: TransferState;
}

const either = (from: TransferState, message: TransferMessage, to: TransferState): Transition[] =>
  (['consumer', 'provider'] as const).map((sender) => ({ from, message, sender, to }));

/**
 * The state machine of DSP 2025-1 (figure and binding). Resume is a TransferStartMessage from
 * SUSPENDED by either party (ids-specification#275; TCK TP:02-04). One addition: the provider's
 * TransferStartMessage in STARTED, which is how the provider hands a fresh data address to a
 * consumer that resumed (the consumer moved to STARTED when it sent its own start).
 */
export const TRANSFER_TRANSITIONS: readonly Transition[] = [
  { from: 'INITIAL', message: 'TransferRequestMessage', sender: 'consumer', to: 'REQUESTED' },
  { from: 'REQUESTED', message: 'TransferStartMessage', sender: 'provider', to: 'STARTED' },
  { from: 'STARTED', message: 'TransferStartMessage', sender: 'provider', to: 'STARTED' },
  ...either('SUSPENDED', 'TransferStartMessage', 'STARTED'),
  ...either('STARTED', 'TransferSuspensionMessage', 'SUSPENDED'),
  ...either('STARTED', 'TransferCompletionMessage', 'COMPLETED'),
  ...either('REQUESTED', 'TransferTerminationMessage', 'TERMINATED'),
  ...either('STARTED', 'TransferTerminationMessage', 'TERMINATED'),
  ...either('SUSPENDED', 'TransferTerminationMessage', 'TERMINATED'),
];

/** The state a message moves a transfer to, or null when the transition is illegal. */
export function nextTransferState(
  from: TransferState,
  message: TransferMessage,
  sender: Party,
): TransferState | null {
  return (
    TRANSFER_TRANSITIONS.find((t) => t.from === from && t.message === message && t.sender === sender)?.to ??
    null
  );
}

/**
 * A message that repeats what already happened (a termination of a terminated transfer, a
 * completion of a completed one): answered with the state and no effect, also after the
 * workflow has ended.
 */
export const isHarmlessTransferRepeat = (state: TransferState, message: TransferMessage): boolean =>
  (state === 'TERMINATED' && message === 'TransferTerminationMessage') ||
  (state === 'COMPLETED' && message === 'TransferCompletionMessage');

/** Operator actions (`POST /api/v1/transfers/{id}/{action}`) and the message each one sends. */
export const TRANSFER_ACTIONS = {
  start: 'TransferStartMessage',
  suspend: 'TransferSuspensionMessage',
  resume: 'TransferStartMessage',
  complete: 'TransferCompletionMessage',
  terminate: 'TransferTerminationMessage',
} as const satisfies Record<string, TransferMessage>;
export type TransferAction = keyof typeof TRANSFER_ACTIONS;

export const isTransferAction = (a: string): a is TransferAction => Object.hasOwn(TRANSFER_ACTIONS, a);

/**
 * The state an operator action of `role` moves a transfer to, or null when the state does not
 * allow it. Resume only resumes; start is the provider's first start, an operator's only when
 * the transfer waits for one (its agreement's offer is `stepwise`): the workflow checks that.
 */
export function actionTarget(
  state: TransferState,
  action: TransferAction,
  role: Party,
): TransferState | null {
  if (action === 'resume' && state !== 'SUSPENDED') return null;
  if (action === 'start' && state !== 'REQUESTED') return null;
  return nextTransferState(state, TRANSFER_ACTIONS[action], role);
}

/** The formats we serve: pull over HTTP through our data plane (dsp-edc.md §2.7). */
export const SUPPORTED_FORMATS = ['HttpData-PULL'] as const;
export const DEFAULT_FORMAT = 'HttpData-PULL';

/**
 * A transfer message as evidence: the bearer token in its data address replaced by `digest` of
 * it (the SHA-256 the provider's data plane keeps), which still proves which token was sent. The
 * evidence chain is permanent and may be disclosed; a token read from it could be renewed and
 * the transfer taken over.
 */
export function withTokenDigest<T>(message: T, digest: (token: string) => string): T {
  const address = (message as { dataAddress?: { endpointProperties?: unknown } } | null)?.dataAddress;
  if (!address || typeof address !== 'object' || !Array.isArray(address.endpointProperties)) return message;
  return {
    ...message,
    dataAddress: {
      ...address,
      endpointProperties: address.endpointProperties.map((p: unknown) => {
        const property = p as { name?: unknown; value?: unknown } | null;
        return property?.name === 'authorization' && typeof property.value === 'string'
          ? { ...property, value: digest(property.value) }
          : p;
      }),
    },
  };
}

/** Which message kind a DSP transfer body is. */
export function transferMessageKind(body: { '@type'?: unknown }): TransferMessage | null {
  const t = body['@type'];
  return typeof t === 'string' && (TRANSFER_MESSAGES as readonly string[]).includes(t)
    ? (t as TransferMessage)
    : null;
}

/**
 * When a consumer renews its data address: a third of the token's lifetime before it expires,
 * at most five minutes before (a ten-minute token is renewed after about 6.7 minutes).
 */
export function renewalDueAt(receivedAtMs: number, expiresAtMs: number): number {
  const lifetime = Math.max(0, expiresAtMs - receivedAtMs);
  return expiresAtMs - Math.min(lifetime / 3, 5 * 60_000);
}

/** Our JSON-LD context for the agreement termination message (docs/transfers.md). */
export const AGREEMENT_CONTEXT_URL = 'https://w3id.org/building-data/agreements/v1/context.jsonld';
/** Where every connector serves AGREEMENT_CONTEXT_DOCUMENT (below its public URL). */
export const AGREEMENT_CONTEXT_PATH = '/contexts/agreements-v1.jsonld';
export const AGREEMENT_NAMESPACE = 'https://w3id.org/building-data/agreements/v1#';

/** The context document behind AGREEMENT_CONTEXT_URL (protected, like the DSP context). */
export const AGREEMENT_CONTEXT_DOCUMENT = {
  '@context': {
    '@version': 1.1,
    '@protected': true,
    pla: AGREEMENT_NAMESPACE,
    AgreementTerminationMessage: 'pla:AgreementTerminationMessage',
    AgreementTermination: 'pla:AgreementTermination',
    AgreementError: 'pla:AgreementError',
    agreementId: { '@id': 'pla:agreementId', '@type': '@id' },
    state: { '@id': 'pla:state', '@type': '@vocab' },
    ENDED: 'pla:ENDED',
    endedAt: { '@id': 'pla:endedAt', '@type': 'http://www.w3.org/2001/XMLSchema#dateTime' },
    endedBy: { '@id': 'pla:endedBy', '@type': '@vocab' },
    consumer: 'pla:consumer',
    provider: 'pla:provider',
    code: 'pla:code',
    reason: { '@id': 'pla:reason', '@container': '@set' },
  },
} as const;

export const AGREEMENT_CONTEXT = [AGREEMENT_CONTEXT_URL] as const;

// DSP 2025-1 transfer documents we send and answer with (compacted, DSP context as an array).

const DSP_CONTEXT = ['https://w3id.org/dspace/2025/1/context.jsonld'];

export const transferProcessAck = (providerPid: string, consumerPid: string, state: string) => ({
  '@context': DSP_CONTEXT,
  '@type': 'TransferProcess',
  providerPid,
  consumerPid,
  state,
});

export const transferError = (
  pids: { providerPid?: string | null; consumerPid?: string | null },
  code: string,
  reason: string[],
) => ({
  '@context': DSP_CONTEXT,
  '@type': 'TransferError',
  providerPid: pids.providerPid ?? '',
  consumerPid: pids.consumerPid ?? '',
  code,
  reason,
});

export const transferRequestMessage = (m: {
  id: string;
  consumerPid: string;
  agreementId: string;
  format: string;
  callbackAddress: string;
}) => ({
  '@context': DSP_CONTEXT,
  '@id': m.id,
  '@type': 'TransferRequestMessage',
  consumerPid: m.consumerPid,
  agreementId: m.agreementId,
  format: m.format,
  callbackAddress: m.callbackAddress,
});

/** Start, suspension, completion or termination: both pids, and what the kind carries. */
export const transferMessage = (
  type: Exclude<TransferMessage, 'TransferRequestMessage'>,
  m: {
    id: string;
    providerPid: string;
    consumerPid: string;
    dataAddress?: object | null;
    code?: string | null;
    reason?: string[];
  },
) => ({
  '@context': DSP_CONTEXT,
  '@id': m.id,
  '@type': type,
  providerPid: m.providerPid,
  consumerPid: m.consumerPid,
  ...(type === 'TransferStartMessage' && m.dataAddress ? { dataAddress: m.dataAddress } : {}),
  ...(type !== 'TransferStartMessage' && type !== 'TransferCompletionMessage' && m.code
    ? { code: m.code }
    : {}),
  ...(type !== 'TransferStartMessage' && type !== 'TransferCompletionMessage' && m.reason?.length
    ? { reason: m.reason }
    : {}),
});

export const agreementTerminationMessage = (m: {
  id: string;
  agreementId: string;
  code: string;
  reason: string[];
}) => ({
  '@context': [...DSP_CONTEXT, ...AGREEMENT_CONTEXT],
  '@id': m.id,
  '@type': 'AgreementTerminationMessage',
  agreementId: m.agreementId,
  code: m.code,
  ...(m.reason.length ? { reason: m.reason } : {}),
});

/** The answer to an AgreementTerminationMessage: the same for the same agreement, however often asked. */
export const agreementTerminationAnswer = (a: { agreementId: string; endedAt: string; endedBy: Party }) => ({
  '@context': [...DSP_CONTEXT, ...AGREEMENT_CONTEXT],
  '@type': 'AgreementTermination',
  agreementId: a.agreementId,
  state: 'ENDED',
  endedAt: a.endedAt,
  endedBy: a.endedBy,
});

export const agreementError = (agreementId: string | null, code: string, reason: string[]) => ({
  '@context': [...DSP_CONTEXT, ...AGREEMENT_CONTEXT],
  '@type': 'AgreementError',
  ...(agreementId ? { agreementId } : {}),
  code,
  reason,
});
