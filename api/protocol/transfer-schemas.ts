/**
 * The DSP 2025-1 transfer messages we accept, as joi schemas after the normative JSON Schemas
 * (required fields; the DataAddress shape), and our AgreementTerminationMessage. Unknown
 * properties are allowed: JSON-LD documents may carry more.
 */
import Joi from 'joi';
import { DSP_CONTEXT_URL } from '../../domain/dsp.js';
import { AGREEMENT_CONTEXT_URL } from '../../domain/transfer.js';

const contextWith = (...urls: string[]) =>
  Joi.alternatives()
    .try(
      urls.reduce((s, url) => s.has(Joi.string().valid(url)), Joi.array().items(Joi.any())),
      ...(urls.length === 1 ? [Joi.string().valid(urls[0])] : []),
    )
    .required()
    .messages({ 'alternatives.match': `must contain ${urls.join(' and ')}` });

const pid = Joi.string().min(1).max(512);

const base = (type: string) =>
  Joi.object({
    '@context': contextWith(DSP_CONTEXT_URL),
    '@type': Joi.string().valid(type).required(),
    '@id': Joi.string().max(512),
  }).unknown(true);

const reason = Joi.array().items(Joi.any()).min(1);

/**
 * DataAddress (transfer/data-address-schema.json): `@type` and `endpointType` required,
 * `endpoint` and `endpointProperties` optional; each property a name and a string value (the
 * normative schema also wants its `@type`, which peers leave out in compacted form: taken when
 * given). Bounded, since a consumer keeps the address in its read model and workflow.
 */
export const dataAddressSchema = Joi.object({
  '@type': Joi.string().valid('DataAddress').required(),
  endpointType: Joi.string().min(1).max(512).required(),
  endpoint: Joi.string()
    .uri({ scheme: ['http', 'https'] })
    .max(2048),
  endpointProperties: Joi.array()
    .items(
      Joi.object({
        '@type': Joi.string().valid('EndpointProperty'),
        name: Joi.string().min(1).max(200).required(),
        value: Joi.string().allow('').max(16_384).required(),
      }).unknown(true),
    )
    .max(50),
}).unknown(true);

export const transferRequestSchema = base('TransferRequestMessage').keys({
  consumerPid: pid.required(),
  agreementId: Joi.string().min(1).max(512).required(),
  format: Joi.string().min(1).max(200).required(),
  callbackAddress: Joi.string()
    .uri({ scheme: ['http', 'https'] })
    .required(),
  dataAddress: dataAddressSchema,
});

const pids = { providerPid: pid.required(), consumerPid: pid.required() };

export const transferStartSchema = base('TransferStartMessage').keys({
  ...pids,
  dataAddress: dataAddressSchema,
});

export const transferSuspensionSchema = base('TransferSuspensionMessage').keys({
  ...pids,
  code: Joi.string(),
  reason,
});

export const transferCompletionSchema = base('TransferCompletionMessage').keys(pids);

export const transferTerminationSchema = base('TransferTerminationMessage').keys({
  ...pids,
  code: Joi.string(),
  reason,
});

/** Our own message (not part of DSP): its terms are in our agreement context (docs/transfers.md). */
export const agreementTerminationSchema = Joi.object({
  '@context': contextWith(AGREEMENT_CONTEXT_URL),
  '@type': Joi.string().valid('AgreementTerminationMessage').required(),
  '@id': Joi.string().max(512),
  agreementId: Joi.string().min(1).max(512).required(),
  code: Joi.string().max(200),
  reason: Joi.array().items(Joi.string().max(1000)).max(10),
}).unknown(true);
