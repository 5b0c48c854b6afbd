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

/**
 * How our own moves in a negotiation are decided. `automatic`: the workflow makes them (a
 * provider's request whose rules differ from the offer still waits for an operator).
 * `manual` (provider): an operator approves each request. `stepwise`: an operator approves
 * every move of ours — the provider's answer to a request (as `manual`), its agreement after
 * the consumer's ACCEPTED and its finalization after VERIFIED; the consumer's verification
 * after AGREED; and, for transfers under an agreement of a stepwise offer, the provider's first
 * start. For operators who decide each step themselves, and for conformance tests that script
 * them.
 */
export const APPROVAL_MODES = ['automatic', 'manual', 'stepwise'] as const;
export type ApprovalMode = (typeof APPROVAL_MODES)[number];

/**
 * The states in which a stepwise negotiation waits for our operator before our next move
 * (besides a request or offer awaiting a decision, which waits in every mode): approve makes
 * the move, terminate ends the negotiation.
 */
export const STEPWISE_HOLDS: Record<Party, readonly NegotiationState[]> = {
  provider: ['ACCEPTED', 'VERIFIED'],
  consumer: ['AGREED'],
};

/**
 * A message that repeats what already happened: a termination of a terminated negotiation, the
 * FINALIZED event of a finalized one. Answered with the state and no effect, the same while our
 * workflow still runs (our own termination being delivered) as after it has ended.
 */
export function isHarmlessRepeat(state: NegotiationState, message: NegotiationMessage, sender: Party) {
  return (
    (state === 'TERMINATED' && message === 'ContractNegotiationTerminationMessage') ||
    (state === 'FINALIZED' && message === 'FinalizedEvent' && sender === 'provider')
  );
}

const RULE_KEYS = ['permission', 'prohibition', 'obligation'] as const;

/**
 * A value with object keys sorted, empty arrays and `constraint: []` dropped, and single values
 * kept as they are: two rule sets that say the same thing compare equal as JSON.
 */
function normalized(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(normalized);
  if (value && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const key of Object.keys(value).sort()) {
      const v = (value as Record<string, unknown>)[key];
      if (v === undefined || (Array.isArray(v) && v.length === 0)) continue;
      out[key] = normalized(v);
    }
    return out;
  }
  return value;
}

/** Whether an ODRL document (offer or agreement) states rules at all, or only refers to an offer by id. */
export const hasRules = (policy: Record<string, unknown>): boolean =>
  RULE_KEYS.some((k) => Array.isArray(policy[k]) && (policy[k] as unknown[]).length > 0);

/** Whether two ODRL documents carry the same permissions, prohibitions and obligations. */
export function sameRules(a: Record<string, unknown>, b: Record<string, unknown>): boolean {
  // A compacted document may give a single rule as an object rather than a one-element array.
  const rules = (p: Record<string, unknown>) =>
    JSON.stringify(
      normalized(Object.fromEntries(RULE_KEYS.map((k) => [k, p[k] === undefined ? [] : [p[k]].flat()]))),
    );
  return rules(a) === rules(b);
}

/**
 * What is wrong with an agreement a provider sent us (consumer side), for people: its target
 * must be the dataset we asked for, its assignee us, its assigner the provider we negotiate with,
 * and its rules those of the offer in force (when we know them: an offer by reference only
 * names its id, and then the provider's rules are the offer's).
 */
export function agreementProblems(
  agreement: Record<string, unknown>,
  expected: {
    target: string | null;
    assignee: string;
    assigner: string;
    offer: Record<string, unknown>;
  },
): string[] {
  const problems: string[] = [];
  const shown = (v: unknown) => (typeof v === 'string' ? v : JSON.stringify(v ?? null));
  if (expected.target !== null && agreement.target !== expected.target)
    problems.push(`its target is ${shown(agreement.target)}, we asked for ${expected.target}`);
  if (agreement.assignee !== expected.assignee)
    problems.push(`its assignee is ${shown(agreement.assignee)}, not us (${expected.assignee})`);
  if (agreement.assigner !== expected.assigner)
    problems.push(`its assigner is ${shown(agreement.assigner)}, not the provider (${expected.assigner})`);
  if (hasRules(expected.offer) && !sameRules(agreement, expected.offer))
    problems.push(`its rules differ from those of offer ${shown(expected.offer['@id'])}`);
  return problems;
}

/** NEGOTIATION_DEADLINE's default: a week for the counterparty's next message. */
export const DEFAULT_RESPONSE_TIMEOUT_MS = 7 * 24 * 3600 * 1000;

/** How much of a counterparty's code and reasons we keep as a process's `error`. */
const MAX_ERROR_LENGTH = 2000;

/**
 * One reason of a termination or suspension as text (DSP leaves the items open): a string as
 * it is; an object by its `message`, a language-tagged `@value`, or else as JSON; anything else
 * as JSON. Never calls a peer-controlled `toString`.
 */
export function reasonText(reason: unknown): string {
  if (typeof reason === 'string') return reason;
  if (reason !== null && typeof reason === 'object' && !Array.isArray(reason)) {
    const r = reason as Record<string, unknown>;
    for (const key of ['message', '@value', 'value']) if (typeof r[key] === 'string') return r[key];
  }
  return JSON.stringify(reason) ?? '';
}

/**
 * The `error` a counterparty's termination leaves: its code and reasons (`code: reason; reason`),
 * readable whatever shape the reasons have, bounded, or `fallback` when it gave none.
 */
export function counterpartyError(code: unknown, reasons: unknown, fallback: string): string {
  const parts = (Array.isArray(reasons) ? reasons : reasons === undefined ? [] : [reasons])
    .map(reasonText)
    .filter((t) => t !== '');
  const text = [typeof code === 'string' && code !== '' ? code : null, parts.join('; ') || null]
    .filter((t): t is string => t !== null)
    .join(': ');
  if (text === '') return fallback;
  return text.length > MAX_ERROR_LENGTH ? `${text.slice(0, MAX_ERROR_LENGTH - 1)}…` : text;
}
