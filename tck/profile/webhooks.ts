/**
 * The TCK's two initiate webhooks (not part of DSP): the TCK asks us, as consumer, to start a
 * negotiation or a transfer with it. Plain JSON POSTs carrying the TCK's fixed Authorization
 * value; we start the process through the management API, as an operator would.
 */
import Router from '@koa/router';
import Joi from 'joi';
import type Koa from 'koa';
import { jsonBodies } from '../../api/middleware/json-body.js';
import { sameSecret } from './auth.js';
import type { Operator } from './operator.js';

export const NEGOTIATION_WEBHOOK = '/tck/negotiations/requests';
export const TRANSFER_WEBHOOK = '/tck/transfers/requests';

const address = Joi.string()
  .uri({ scheme: ['http', 'https'] })
  .required();

const negotiationRequest = Joi.object({
  providerId: Joi.string().required(),
  offerId: Joi.string().min(1).required(),
  datasetId: Joi.string().min(1).required(),
  connectorAddress: address,
}).unknown(true);

const transferRequest = Joi.object({
  providerId: Joi.string().required(),
  agreementId: Joi.string().min(1).required(),
  format: Joi.string().min(1).required(),
  connectorAddress: address,
}).unknown(true);

class WebhookError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

export interface WebhookOptions {
  authorization: string;
  /** The TCK participant: its id, the DID we know it by, and its address. */
  participant: { id: string; did: string; address: string };
  /** Set once the connector is up and the profile holds its operator key. */
  operator: () => Operator | null;
}

export function tckWebhooks(options: WebhookOptions): Router {
  const router = new Router();

  router.use(async function webhookErrors(ctx: Koa.Context, next: Koa.Next) {
    try {
      await next();
    } catch (err) {
      const e = err instanceof WebhookError ? err : new WebhookError(500, 'internal', (err as Error).message);
      ctx.status = e.status;
      ctx.body = { error: { code: e.code, message: e.message } };
    }
  });
  router.use(
    ['/tck/negotiations', '/tck/transfers'],
    async function tckOnly(ctx: Koa.Context, next: Koa.Next) {
      if (!sameSecret(ctx.get('authorization'), options.authorization))
        throw new WebhookError(401, 'unauthenticated', 'only the TCK may call its webhooks');
      await next();
    },
  );
  router.use(
    ['/tck/negotiations', '/tck/transfers'],
    jsonBodies(() => {
      throw new WebhookError(400, 'invalid_request', 'the body is not valid JSON');
    }),
  );

  function validated<T>(schema: Joi.Schema, body: unknown): T {
    const { error, value } = schema.validate(body);
    if (error) throw new WebhookError(400, 'invalid_request', error.message);
    if ((value as { providerId: string }).providerId !== options.participant.id)
      throw new WebhookError(
        400,
        'invalid_request',
        `unknown provider ${(value as { providerId: string }).providerId}`,
      );
    return value as T;
  }

  function operator(): Operator {
    const op = options.operator();
    if (!op) throw new WebhookError(503, 'unavailable', 'the TCK profile is not ready yet');
    return op;
  }

  /** Forwards the management API's answer: the TCK sees our refusal as it is. */
  function answer(ctx: Koa.Context, result: { status: number; body: unknown }) {
    ctx.status = result.status;
    ctx.body = result.body ?? '';
  }

  router.post(NEGOTIATION_WEBHOOK, async function startNegotiation(ctx) {
    const r = validated<{ offerId: string; datasetId: string; connectorAddress: string }>(
      negotiationRequest,
      ctx.request.body,
    );
    // The TCK names the offer but does not serve a catalog: the offer we send back is the one
    // it named (its id exactly), with the plain use permission its scenarios offer. It signs
    // agreements with its participant id (it has no DID), which the consumer then checks as
    // the assigner. Stepwise: our verification waits for the script (tck/profile/scripts.ts).
    const result = await operator().call('POST', '/api/v1/negotiations', {
      counterparty_address: r.connectorAddress,
      counterparty_did: options.participant.did,
      counterparty_participant_id: options.participant.id,
      stepwise: true,
      offer: { '@id': r.offerId, '@type': 'Offer', permission: [{ action: 'use' }] },
      dataset_id: r.datasetId,
    });
    answer(ctx, result);
  });

  router.post(TRANSFER_WEBHOOK, async function startTransfer(ctx) {
    const r = validated<{ agreementId: string; format: string; connectorAddress: string }>(
      transferRequest,
      ctx.request.body,
    );
    // The provider's address comes from the agreement's negotiation, as for any transfer we start.
    if (r.connectorAddress.replace(/\/+$/, '') !== options.participant.address.replace(/\/+$/, ''))
      throw new WebhookError(
        400,
        'invalid_request',
        `the TCK is at ${options.participant.address}, not ${r.connectorAddress}`,
      );
    const result = await operator().call('POST', '/api/v1/transfers', {
      agreement_id: r.agreementId,
      format: r.format,
    });
    answer(ctx, result);
  });

  return router;
}
