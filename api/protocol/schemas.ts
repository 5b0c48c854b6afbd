/**
 * The DSP 2025-1 negotiation messages we accept, as joi schemas after the normative JSON
 * Schemas (required fields, the oneOf of callbackAddress and the counterparty's pid).
 * Unknown properties are allowed: JSON-LD documents may carry more.
 */
import Joi from 'joi';
import { DSP_CONTEXT_URL } from '../../domain/dsp.js';
import { isRfc3339 } from '../../domain/time.js';

const context = Joi.alternatives()
  .try(
    Joi.array().items(Joi.any()).has(Joi.string().valid(DSP_CONTEXT_URL)),
    Joi.string().valid(DSP_CONTEXT_URL),
  )
  .required()
  .messages({ 'alternatives.match': `must contain ${DSP_CONTEXT_URL}` });

const pid = Joi.string().min(1).max(512);

/** Limits of any DSP message we accept, beyond its schema (see messageShapeProblem). */
export const MESSAGE_LIMITS = { bytes: 256 * 1024, depth: 32 } as const;

// A NUL or a lone surrogate cannot be stored (PostgreSQL jsonb refuses both).
// eslint-disable-next-line no-control-regex -- NUL is exactly what this looks for
const UNSTORABLE = /\u0000|\p{Cs}/u;

/**
 * What makes a message unusable whatever its schema says, or null: larger than 256 KiB as
 * JSON (a workflow carries it in its history and activities, where payloads are capped at
 * 2 MB), nested deeper than 32 levels, a number JSON cannot carry back, or text PostgreSQL
 * cannot store. Checked at the HTTP edge, so that nothing a peer sends can fail a workflow task
 * or leave an activity retrying for ever.
 */
export function messageShapeProblem(body: unknown): string | null {
  if (Buffer.byteLength(JSON.stringify(body) ?? '', 'utf8') > MESSAGE_LIMITS.bytes)
    return `the message is larger than ${MESSAGE_LIMITS.bytes / 1024} KiB`;
  // Iterative, so that depth itself cannot overflow the stack here.
  const pending: Array<{ value: unknown; depth: number }> = [{ value: body, depth: 0 }];
  while (pending.length > 0) {
    const { value, depth } = pending.pop()!;
    if (typeof value === 'string') {
      if (UNSTORABLE.test(value)) return 'the message contains a NUL character or a lone surrogate';
    } else if (typeof value === 'number') {
      if (!Number.isFinite(value)) return 'the message contains a number out of range';
    } else if (value !== null && typeof value === 'object') {
      if (depth >= MESSAGE_LIMITS.depth)
        return `the message is nested deeper than ${MESSAGE_LIMITS.depth} levels`;
      for (const [key, v] of Object.entries(value)) {
        if (UNSTORABLE.test(key)) return 'the message contains a NUL character or a lone surrogate';
        pending.push({ value: v, depth: depth + 1 });
      }
    }
  }
  return null;
}

/**
 * xsd:dateTime as the DSP schema's pattern has it (the offset optional: then UTC), and a real
 * instant: an agreement whose timestamp cannot be stored is refused here, not retried later.
 */
const XSD_DATE_TIME = /^-?\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})?$/;
export const agreementInstant = (v: string): Date | null => {
  if (!XSD_DATE_TIME.test(v)) return null;
  const zoned = /(Z|[+-]\d{2}:\d{2})$/.test(v) ? v : `${v}Z`;
  // isRfc3339 also refuses days a month does not have (Date would roll 02-31 over into March).
  return isRfc3339(zoned) ? new Date(zoned) : null;
};
const timestamp = Joi.string()
  .custom((v: string, h) => (agreementInstant(v) ? v : h.error('any.invalid')))
  .messages({ 'any.invalid': '{{#label}} must be an xsd:dateTime (e.g. 2025-01-31T12:00:00Z)' });
const messageOffer = Joi.object({
  '@id': Joi.string().min(1).required(),
  '@type': Joi.string(),
  // MessageOffer: an IRI (the workflows compare and show it as text).
  target: Joi.string(),
  // Our own term (building-data context): the objects and points the consumer narrows to.
  narrowing: Joi.object({
    objects: Joi.array().items(Joi.string().min(1).max(512)).max(1000),
    points: Joi.array().items(Joi.string().min(1).max(512)).max(10_000),
  })
    .unknown(true)
    .allow(null),
}).unknown(true);

const base = (type: string) =>
  Joi.object({
    '@context': context,
    '@type': Joi.string().valid(type).required(),
    '@id': Joi.string(),
  }).unknown(true);

export const contractRequestSchema = base('ContractRequestMessage')
  .keys({
    consumerPid: pid.required(),
    providerPid: pid,
    callbackAddress: Joi.string().uri({ scheme: ['http', 'https'] }),
    offer: messageOffer.required(),
  })
  .xor('callbackAddress', 'providerPid');

export const contractOfferSchema = base('ContractOfferMessage')
  .keys({
    providerPid: pid.required(),
    consumerPid: pid,
    callbackAddress: Joi.string().uri({ scheme: ['http', 'https'] }),
    offer: messageOffer.required(),
  })
  .xor('callbackAddress', 'consumerPid');

export const contractAgreementSchema = base('ContractAgreementMessage').keys({
  providerPid: pid.required(),
  consumerPid: pid.required(),
  agreement: Joi.object({
    '@id': Joi.string().min(1).required(),
    '@type': Joi.string().valid('Agreement').required(),
    target: Joi.string().required(),
    assigner: Joi.string().required(),
    assignee: Joi.string().required(),
    timestamp,
  })
    .unknown(true)
    .required(),
});

export const verificationSchema = base('ContractAgreementVerificationMessage').keys({
  providerPid: pid.required(),
  consumerPid: pid.required(),
});

export const eventSchema = base('ContractNegotiationEventMessage').keys({
  providerPid: pid.required(),
  consumerPid: pid.required(),
  eventType: Joi.string().valid('ACCEPTED', 'FINALIZED', 'dspace:ACCEPTED', 'dspace:FINALIZED').required(),
});

export const terminationSchema = base('ContractNegotiationTerminationMessage').keys({
  providerPid: pid.required(),
  consumerPid: pid.required(),
  code: Joi.string(),
  reason: Joi.array().items(Joi.any()).min(1),
});

export const catalogRequestSchema = base('CatalogRequestMessage').keys({ filter: Joi.array() });
