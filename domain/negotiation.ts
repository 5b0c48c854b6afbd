/**
 * Contract negotiation, DSP 2025-1 (dsp-edc.md §1.4): states, messages, and the transition
 * table as data. The workflow consults it to act and its Update validators to refuse.
 *
 * A state moves when a message is sent (optimistically) or received. Moving on send means a
 * peer's next message is accepted even when it arrives before the acknowledgement of ours
 * (the race that makes EDC answer 409, edc-interop.md); a message that cannot be delivered
 * terminates the negotiation instead.
 */
export const NEGOTIATION_STATES = [
  'INITIAL',
  'REQUESTED',
  'OFFERED',
  'ACCEPTED',
  'AGREED',
  'VERIFIED',
  'FINALIZED',
  'TERMINATED',
] as const;
export type NegotiationState = (typeof NEGOTIATION_STATES)[number];

export type Party = 'consumer' | 'provider';

export const TERMINAL: readonly NegotiationState[] = ['FINALIZED', 'TERMINATED'];
export const isTerminal = (s: NegotiationState) => TERMINAL.includes(s);

/** DSP message kinds; the two events are told apart by their eventType. */
export type NegotiationMessage =
  | 'ContractRequestMessage'
  | 'ContractOfferMessage'
  | 'AcceptedEvent'
  | 'ContractAgreementMessage'
  | 'ContractAgreementVerificationMessage'
  | 'FinalizedEvent'
  | 'ContractNegotiationTerminationMessage';

interface Transition {
  from: NegotiationState;
  message: NegotiationMessage;
  sender: Party;
  to: NegotiationState;
}

/**
 * The state machine of DSP 2025-1 (figure and binding). INITIAL is "nothing exchanged yet".
 * Termination is accepted from either party in every non-terminal state (the prose's liberal
 * reading, dsp-edc.md §1.9.1).
 */
export const NEGOTIATION_TRANSITIONS: readonly Transition[] = [
  { from: 'INITIAL', message: 'ContractRequestMessage', sender: 'consumer', to: 'REQUESTED' },
  { from: 'INITIAL', message: 'ContractOfferMessage', sender: 'provider', to: 'OFFERED' },
  { from: 'REQUESTED', message: 'ContractOfferMessage', sender: 'provider', to: 'OFFERED' },
  { from: 'REQUESTED', message: 'ContractAgreementMessage', sender: 'provider', to: 'AGREED' },
  { from: 'OFFERED', message: 'ContractRequestMessage', sender: 'consumer', to: 'REQUESTED' },
  { from: 'OFFERED', message: 'AcceptedEvent', sender: 'consumer', to: 'ACCEPTED' },
  { from: 'ACCEPTED', message: 'ContractAgreementMessage', sender: 'provider', to: 'AGREED' },
  { from: 'AGREED', message: 'ContractAgreementVerificationMessage', sender: 'consumer', to: 'VERIFIED' },
  { from: 'VERIFIED', message: 'FinalizedEvent', sender: 'provider', to: 'FINALIZED' },
  ...(['INITIAL', 'REQUESTED', 'OFFERED', 'ACCEPTED', 'AGREED', 'VERIFIED'] as const).flatMap((from) =>
    (['consumer', 'provider'] as const).map((sender) => ({
      from,
      message: 'ContractNegotiationTerminationMessage' as const,
      sender,
      to: 'TERMINATED' as const,
    })),
  ),
];

/** The state a message moves a negotiation to, or null when the transition is illegal. */
export function nextNegotiationState(
  from: NegotiationState,
  message: NegotiationMessage,
  sender: Party,
): NegotiationState | null {
  return (
    NEGOTIATION_TRANSITIONS.find((t) => t.from === from && t.message === message && t.sender === sender)
      ?.to ?? null
  );
}

export const otherParty = (p: Party): Party => (p === 'consumer' ? 'provider' : 'consumer');

/** Which message kind a DSP body is. */
export function negotiationMessageKind(body: {
  '@type'?: unknown;
  eventType?: unknown;
}): NegotiationMessage | null {
  switch (body['@type']) {
    case 'ContractRequestMessage':
    case 'ContractOfferMessage':
    case 'ContractAgreementMessage':
    case 'ContractAgreementVerificationMessage':
    case 'ContractNegotiationTerminationMessage':
      return body['@type'];
    case 'ContractNegotiationEventMessage':
      return body.eventType === 'ACCEPTED' || body.eventType === 'dspace:ACCEPTED'
        ? 'AcceptedEvent'
        : body.eventType === 'FINALIZED' || body.eventType === 'dspace:FINALIZED'
          ? 'FinalizedEvent'
          : null;
    default:
      return null;
  }
}

/** Operator approval of a provider's incoming request (offer approval `manual`). */
export type Approval = 'pending' | 'approved' | 'rejected' | 'expired' | null;
