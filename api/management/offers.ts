/** Offers: a product plus an access policy and a contract policy, approved automatically or by an operator. */
import Joi from 'joi';
import { randomUUID } from 'node:crypto';
import { route } from '../routes.js';
import type { Services } from '../services.js';
import { idParams, pageOf, pageQuery, resourceId, toPageRequest } from './schemas.js';
import { dateTime } from '../validation.js';
import { conflict, invalidRequest, notFound } from '../../domain/errors.js';
import { offerStore, type OfferRecord } from '../../db/offers.js';
import { APPROVAL_MODES, type ApprovalMode } from '../../domain/negotiation.js';
import { productStore } from '../../db/products.js';
import { policyStore } from '../../db/policies.js';
import { isUniqueViolation } from '../../db/paging.js';

interface OfferInput {
  id?: string | null;
  asset_id: string;
  access_policy_id: string;
  contract_policy_id: string;
  approval?: ApprovalMode | null;
}

const offerBody = Joi.object({
  id: resourceId().allow(null),
  asset_id: Joi.string().min(1).required(),
  access_policy_id: Joi.string().min(1).required(),
  contract_policy_id: Joi.string().min(1).required(),
  approval: Joi.string()
    .valid(...APPROVAL_MODES)
    .allow(null)
    .description(
      'automatic (default): agreed without an operator; manual: an operator approves each request; stepwise: an operator approves each of our moves (request, agreement, finalization) and the first start of each transfer under its agreements',
    ),
  created_at: dateTime().description('output only; ignored on input'),
});

export const offerOutput = Joi.object({
  id: Joi.string().required(),
  asset_id: Joi.string().required(),
  access_policy_id: Joi.string().required(),
  contract_policy_id: Joi.string().required(),
  approval: Joi.string().valid(...APPROVAL_MODES),
  created_at: dateTime(),
});

export const presentOffer = (o: OfferRecord) => ({ ...o });

export function offerRoutes(services: Services) {
  const { db } = services;

  /** Every reference must exist; the field that names a missing one is reported. */
  async function checkReferences(body: OfferInput) {
    if (!(await productStore(db).exists(body.asset_id)))
      throw invalidRequest(`no product '${body.asset_id}'`, 'asset_id');
    for (const field of ['access_policy_id', 'contract_policy_id'] as const) {
      if (!(await policyStore(db).exists(body[field])))
        throw invalidRequest(`no policy '${body[field]}'`, field);
    }
  }

  return [
    route<never, never, OfferInput>({
      method: 'post',
      path: '/offers',
      summary: 'Create an offer (an id is made when left out; approval is automatic by default)',
      tag: 'offers',
      role: 'operator',
      body: offerBody,
      response: offerOutput,
      status: 201,
      errors: ['conflict'],
      async handler({ body }) {
        await checkReferences(body);
        const id = body.id ?? `offer-${randomUUID()}`;
        try {
          return presentOffer(
            await offerStore(db).insert({
              id,
              asset_id: body.asset_id,
              access_policy_id: body.access_policy_id,
              contract_policy_id: body.contract_policy_id,
              approval: body.approval ?? 'automatic',
            }),
          );
        } catch (err) {
          if (isUniqueViolation(err)) throw conflict(`an offer with id '${id}' already exists`);
          throw err;
        }
      },
    }),
    route<never, { cursor?: string; limit: number }>({
      method: 'get',
      path: '/offers',
      summary: 'List offers',
      tag: 'offers',
      role: 'viewer',
      query: pageQuery,
      response: pageOf(offerOutput),
      async handler({ query }) {
        const page = await offerStore(db).list(toPageRequest(query));
        return { items: page.items.map(presentOffer), next_cursor: page.next_cursor };
      },
    }),
    route<{ id: string }>({
      method: 'get',
      path: '/offers/:id',
      summary: 'Read an offer',
      tag: 'offers',
      role: 'viewer',
      params: idParams,
      response: offerOutput,
      async handler({ params }) {
        const offer = await offerStore(db).get(params.id);
        if (!offer) throw notFound('offer', params.id);
        return presentOffer(offer);
      },
    }),
    route<{ id: string }, never, OfferInput>({
      method: 'put',
      path: '/offers/:id',
      summary:
        'Replace an offer; switching to automatic approval leaves requests already waiting as they are',
      tag: 'offers',
      role: 'operator',
      params: idParams,
      body: offerBody,
      response: offerOutput,
      async handler({ params, body }) {
        if (body.id && body.id !== params.id)
          throw invalidRequest(`must be '${params.id}' or left out`, 'id');
        const stored = await offerStore(db).get(params.id);
        if (!stored) throw notFound('offer', params.id);
        await checkReferences(body);
        const offer = await offerStore(db).replace({
          id: params.id,
          asset_id: body.asset_id,
          access_policy_id: body.access_policy_id,
          contract_policy_id: body.contract_policy_id,
          // Left out keeps the mode: a replace must not silently switch manual approval off.
          approval: body.approval ?? stored.approval,
        });
        if (!offer) throw notFound('offer', params.id);
        return presentOffer(offer);
      },
    }),
  ];
}
