/**
 * Negotiations and agreements for operators: start (consumer), list, read, approve, reject,
 * terminate, counter-offer, counter-request, accept. A negotiation whose approval is `stepwise`
 * (the provider's offer, or `stepwise: true` at the start) also waits for approve or terminate
 * before each of our own moves (docs/negotiation.md).
 */
import Joi from 'joi';
import { randomUUID } from 'node:crypto';
import {
  WithStartWorkflowOperation,
  WorkflowNotFoundError,
  WorkflowUpdateFailedError,
} from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import { route } from '../routes.js';
import type { Services } from '../services.js';
import { historyEntry, idParams, pageOf, pageQuery, toPageRequest } from './schemas.js';
import { dateTime, nullableString } from '../validation.js';
import { ApiError, conflict, notFound } from '../../domain/errors.js';
import {
  DEFAULT_RESPONSE_TIMEOUT_MS,
  NEGOTIATION_STATES,
  isTerminal,
  type NegotiationState,
  type Party,
} from '../../domain/negotiation.js';
import { negotiationStore, type NegotiationRecord } from '../../db/negotiations.js';
import { agreementStore } from '../../db/agreements.js';
import { outboxStore } from '../../db/outbox.js';
import { productStore } from '../../db/products.js';
import type { Db } from '../../db/knex.js';
import { buildingDataContextUrl, type OdrlOffer } from '../../domain/dsp.js';
import {
  ALREADY_ENDED,
  NOT_AWAITING_APPROVAL,
  decisionUpdate,
  startedUpdate,
  type NegotiationInput,
  type OperatorDecision,
} from '../../workflows/negotiation-messages.js';
import type { Caller } from '../middleware/authenticate.js';

interface StartInput {
  counterparty_address: string;
  counterparty_did: string;
  counterparty_participant_id?: string | null;
  offer_id?: string;
  offer?: Record<string, unknown> & { '@id': string };
  dataset_id?: string | null;
  purpose?: string | null;
  connection_alias?: string | null;
  narrowing?: { objects?: string[]; points?: string[] } | null;
  stepwise?: boolean;
}

const startBody = Joi.object({
  counterparty_address: Joi.string()
    .uri({ scheme: ['http', 'https'] })
    .required()
    .description("the provider's DSP base address"),
  counterparty_did: Joi.string()
    .pattern(/^did:[a-z0-9]+:.+$/)
    .required(),
  counterparty_participant_id: nullableString()
    .max(500)
    .description("the provider's participant id as it signs agreements (assigner); default: its DID"),
  offer_id: Joi.string().min(1),
  offer: Joi.object({ '@id': Joi.string().min(1).required() }).unknown(true),
  dataset_id: nullableString(),
  purpose: nullableString().max(500),
  connection_alias: Joi.string()
    .pattern(/^[a-z0-9][a-z0-9-]{0,62}$/)
    .allow(null),
  narrowing: Joi.object({
    objects: Joi.array().items(Joi.string().min(1)).min(1).unique(),
    points: Joi.array().items(Joi.string().min(1)).min(1).unique(),
  }).allow(null),
  stepwise: Joi.boolean()
    .default(false)
    .description(
      "wait for an operator's approve before verifying the provider's agreement (AGREED); terminate refuses it",
    ),
}).xor('offer_id', 'offer');

/** An offer by value, as a counter-offer or counter-request carries it (DSP: a rule list is never empty). */
const ruleOffer = Joi.object({
  '@id': Joi.string().min(1).required(),
  permission: Joi.array().items(Joi.object().unknown(true)).min(1),
  prohibition: Joi.array().items(Joi.object().unknown(true)).min(1),
  obligation: Joi.array().items(Joi.object().unknown(true)).min(1),
})
  .unknown(true)
  .or('permission', 'prohibition')
  .required();

const negotiationOutput = Joi.object({
  id: Joi.string().required(),
  role: Joi.string().valid('provider', 'consumer').required(),
  state: Joi.string()
    .valid(...NEGOTIATION_STATES)
    .required(),
  consumer_pid: Joi.string().required(),
  provider_pid: Joi.string().allow(null).required(),
  counterparty_did: Joi.string().required(),
  counterparty_address: Joi.string().allow(null),
  counterparty_name: Joi.string().allow(null),
  dataset_id: Joi.string().allow(null),
  offer_id: Joi.string().allow(null),
  agreement_id: Joi.string().allow(null),
  purpose: Joi.string().allow(null),
  offer: Joi.object().unknown(true).required(),
  odrl: Joi.object().unknown(true).required(),
  connection_alias: Joi.string().allow(null),
  error: Joi.string().allow(null),
  history: Joi.array().items(historyEntry).required(),
  approval: Joi.string().allow(null),
  expires_at: dateTime().allow(null),
  decided_by: Joi.string().allow(null),
  decided_at: dateTime().allow(null),
  narrowing: Joi.object().unknown(true).allow(null),
  outbox: Joi.array().items(Joi.object().unknown(true)).required(),
  objects: Joi.array().items(Joi.string()).allow(null),
  points: Joi.array().items(Joi.string()).allow(null),
  conflicts: Joi.array()
    .items(Joi.object({ object: Joi.string(), consumer_did: Joi.string(), agreement_id: Joi.string() }))
    .allow(null),
  created_at: dateTime().required(),
  updated_at: dateTime().required(),
});

/**
 * Other consumers already steering these objects: their agreements (provider side, active)
 * whose product shares an object with this one and whose rules permit writing.
 */
async function conflictsFor(db: Db, record: NegotiationRecord, objects: string[]) {
  if (objects.length === 0) return [];
  const rows: Array<{
    id: string;
    consumer_did: string;
    agreement: { permission?: Array<{ action?: string }> };
    objects: string[];
  }> = await db('agreements as a')
    .join('products as p', 'p.id', 'a.dataset_id')
    .where('a.role', 'provider')
    .andWhere('a.state', 'active')
    .andWhereNot('a.consumer_did', record.counterparty_did)
    .andWhereRaw('p.objects \\?| ?::text[]', [objects])
    .select('a.id', 'a.consumer_did', 'a.agreement', 'p.objects');
  return rows
    .filter((r) => (r.agreement.permission ?? []).some((p) => p.action === 'write'))
    .flatMap((r) =>
      r.objects
        .filter((o) => objects.includes(o))
        .map((object) => ({ object, consumer_did: r.consumer_did, agreement_id: r.id })),
    );
}

/** The counterparty's name in the authority's registry (cached there); null when unknown or unreachable. */
async function counterpartyName(services: Services, did: string): Promise<string | null> {
  try {
    return (await services.authority?.member(did))?.name ?? null;
  } catch {
    return null;
  }
}

export async function presentNegotiation(services: Services, record: NegotiationRecord, single: boolean) {
  const { db } = services;
  const [history, outbox] = single
    ? await Promise.all([negotiationStore(db).history(record.id), outboxStore(db).undelivered(record.id)])
    : [[], await outboxStore(db).undelivered(record.id)];
  let objects: string[] | null = null;
  let points: string[] | null = null;
  let conflicts: Array<{ object: string; consumer_did: string; agreement_id: string }> | null = null;
  if (single && record.role === 'provider' && record.dataset_id) {
    const product = await productStore(db).get(record.dataset_id);
    objects = product?.objects ?? null;
    points = product?.points ?? null;
    conflicts = await conflictsFor(db, record, objects ?? []);
  }
  const { workflow_id: _w, version: _v, seq: _s, ...fields } = record as NegotiationRecord & { seq?: number };
  return {
    ...fields,
    counterparty_name: await counterpartyName(services, record.counterparty_did),
    odrl: record.offer,
    history,
    outbox,
    ...(single ? { objects, points, conflicts } : {}),
  };
}

function decisionFailure(err: unknown): ApiError | null {
  if (!(err instanceof WorkflowUpdateFailedError)) return null;
  const cause = err.cause;
  if (
    cause instanceof ApplicationFailure &&
    (cause.type === NOT_AWAITING_APPROVAL || cause.type === ALREADY_ENDED)
  ) {
    return conflict(cause.message);
  }
  return null;
}

export function negotiationRoutes(services: Services) {
  const { db } = services;
  const temporal = () => {
    if (!services.temporal) throw new ApiError('unavailable', 'Temporal is not reachable');
    return services.temporal;
  };

  async function decide(
    id: string,
    action: OperatorDecision['action'],
    caller: Caller | undefined,
    reason: string | null,
    offer?: OdrlOffer,
  ) {
    const record = await negotiationStore(db).get(id);
    if (!record) throw notFound('negotiation', id);
    try {
      await temporal()
        .workflow.getHandle(record.workflow_id)
        .executeUpdate(decisionUpdate, {
          args: [
            {
              action,
              by: caller ? `${caller.name} (${caller.id})` : 'unknown',
              reason,
              ...(offer ? { offer } : {}),
            },
          ],
        });
    } catch (err) {
      // The workflow has ended: nothing awaits approval and nothing is left to terminate.
      if (err instanceof WorkflowNotFoundError && isTerminal(record.state)) {
        if (action === 'terminate') throw conflict(`the negotiation has ended (${record.state})`);
        throw conflict(
          record.approval === 'expired'
            ? 'the request expired before a decision'
            : `the negotiation is not awaiting approval (${record.state})`,
        );
      }
      const mapped = decisionFailure(err);
      if (mapped) throw mapped;
      throw err;
    }
    return presentNegotiation(services, (await negotiationStore(db).get(id))!, true);
  }

  return [
    route<never, never, StartInput>({
      method: 'post',
      path: '/negotiations',
      summary: 'Start a negotiation with a provider (we are the consumer)',
      tag: 'negotiations',
      role: 'operator',
      body: startBody,
      response: negotiationOutput,
      status: 201,
      async handler({ body }) {
        const uuid = randomUUID();
        const consumerPid = `urn:uuid:${uuid}`;
        const offer = body.offer ?? { '@id': body.offer_id!, '@type': 'Offer' };
        const datasetId = body.dataset_id ?? (typeof offer.target === 'string' ? offer.target : null);
        const input: NegotiationInput = {
          role: 'consumer',
          id: consumerPid,
          consumerPid,
          providerPid: null,
          ourDid: services.connector.did,
          ourAddress: services.connector.dspAddress,
          ourContext: buildingDataContextUrl(services.connector.publicUrl),
          counterpartyDid: body.counterparty_did,
          counterpartyId: body.counterparty_participant_id ?? null,
          counterpartyAddress: body.counterparty_address,
          offer: {
            '@type': 'Offer',
            ...offer,
            ...(datasetId ? { target: datasetId } : {}),
            ...(body.narrowing ? { narrowing: body.narrowing } : {}),
          },
          datasetId,
          offerId: offer['@id'],
          purpose: body.purpose ?? null,
          connectionAlias: body.connection_alias ?? null,
          narrowing: body.narrowing ?? null,
          approval: body.stepwise ? 'stepwise' : 'automatic',
          approvalTimeoutMs: services.connector.approvalTimeoutMs,
          responseTimeoutMs: services.connector.responseTimeoutMs ?? DEFAULT_RESPONSE_TIMEOUT_MS,
          retry: services.connector.deliveryRetry,
        };
        await temporal().workflow.executeUpdateWithStart(startedUpdate, {
          startWorkflowOperation: new WithStartWorkflowOperation('negotiation', {
            workflowId: `negotiation/consumer/${uuid}`,
            taskQueue: services.taskQueue,
            args: [input],
            workflowIdConflictPolicy: 'FAIL',
          }),
        });
        return presentNegotiation(services, (await negotiationStore(db).get(consumerPid))!, true);
      },
    }),
    route<never, { cursor?: string; limit: number; role?: Party; state?: NegotiationState }>({
      method: 'get',
      path: '/negotiations',
      summary: 'List negotiations (filter by role and state)',
      tag: 'negotiations',
      role: 'viewer',
      query: pageQuery.keys({
        role: Joi.string().valid('provider', 'consumer'),
        state: Joi.string().valid(...NEGOTIATION_STATES),
      }),
      response: pageOf(negotiationOutput),
      async handler({ query }) {
        const page = await negotiationStore(db).list(
          { role: query.role, state: query.state },
          toPageRequest(query),
        );
        const items = [];
        for (const r of page.items) items.push(await presentNegotiation(services, r, false));
        return { items, next_cursor: page.next_cursor };
      },
    }),
    route<{ id: string }>({
      method: 'get',
      path: '/negotiations/:id',
      summary: 'Read a negotiation with its history and undelivered messages',
      tag: 'negotiations',
      role: 'viewer',
      params: idParams,
      response: negotiationOutput,
      async handler({ params }) {
        const record = await negotiationStore(db).get(params.id);
        if (!record) throw notFound('negotiation', params.id);
        return presentNegotiation(services, record, true);
      },
    }),
    route<{ id: string }>({
      method: 'post',
      path: '/negotiations/:id/approve',
      summary:
        'Approve a request awaiting approval (provider), or the move a stepwise negotiation holds (agree, finalize; consumer: verify)',
      tag: 'negotiations',
      role: 'operator',
      params: idParams,
      response: negotiationOutput,
      errors: ['conflict'],
      handler: ({ params, caller }) => decide(params.id, 'approve', caller, null),
    }),
    route<{ id: string }, never, { reason?: string | null }>({
      method: 'post',
      path: '/negotiations/:id/reject',
      summary: 'Reject a request awaiting approval; the reason travels to the consumer',
      tag: 'negotiations',
      role: 'operator',
      params: idParams,
      body: Joi.object({ reason: Joi.string().max(500).allow(null) }),
      response: negotiationOutput,
      errors: ['conflict'],
      handler: ({ params, body, caller }) => decide(params.id, 'reject', caller, body.reason ?? null),
    }),
    route<{ id: string }>({
      method: 'post',
      path: '/negotiations/:id/terminate',
      summary:
        'Terminate a negotiation (for a request or offer awaiting approval: a rejection; also refuses a move a stepwise negotiation holds)',
      tag: 'negotiations',
      role: 'operator',
      params: idParams,
      response: negotiationOutput,
      errors: ['conflict'],
      handler: ({ params, caller }) => decide(params.id, 'terminate', caller, null),
    }),
    route<{ id: string }, never, { offer: OdrlOffer }>({
      method: 'post',
      path: '/negotiations/:id/counter-offer',
      summary: 'Answer a request awaiting approval with a counter-offer (provider)',
      tag: 'negotiations',
      role: 'operator',
      params: idParams,
      body: Joi.object({ offer: ruleOffer }),
      response: negotiationOutput,
      errors: ['conflict'],
      handler: ({ params, body, caller }) => decide(params.id, 'counter_offer', caller, null, body.offer),
    }),
    route<{ id: string }, never, { offer: OdrlOffer }>({
      method: 'post',
      path: '/negotiations/:id/counter-request',
      summary: "Answer the provider's offer with a counter-request (consumer)",
      tag: 'negotiations',
      role: 'operator',
      params: idParams,
      body: Joi.object({ offer: ruleOffer }),
      response: negotiationOutput,
      errors: ['conflict'],
      handler: ({ params, body, caller }) => decide(params.id, 'counter_request', caller, null, body.offer),
    }),
    route<{ id: string }>({
      method: 'post',
      path: '/negotiations/:id/accept',
      summary: "Accept the provider's offer or counter-offer (consumer)",
      tag: 'negotiations',
      role: 'operator',
      params: idParams,
      response: negotiationOutput,
      errors: ['conflict'],
      handler: ({ params, caller }) => decide(params.id, 'accept', caller, null),
    }),
    route<never, { cursor?: string; limit: number }>({
      method: 'get',
      path: '/agreements',
      summary: 'List agreements',
      tag: 'agreements',
      role: 'viewer',
      query: pageQuery,
      handler: ({ query }) => agreementStore(db).list(toPageRequest(query)),
    }),
    route<{ id: string }>({
      method: 'get',
      path: '/agreements/:id',
      summary: 'Read an agreement',
      tag: 'agreements',
      role: 'viewer',
      params: idParams,
      async handler({ params }) {
        const a = await agreementStore(db).get(params.id);
        if (!a) throw notFound('agreement', params.id);
        return a;
      },
    }),
  ];
}
