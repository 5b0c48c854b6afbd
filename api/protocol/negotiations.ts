/**
 * DSP 2025-1 contract negotiation endpoints, both roles, below the DSP base (dsp-edc.md §1.4).
 * Provider: POST negotiations/request (201), POST negotiations/:pid/{request,events,
 * agreement/verification,termination}, GET negotiations/:pid. Consumer (our callback address is
 * the same base): POST negotiations/:cid/{offers,agreement,events,termination}, GET negotiations/:cid.
 *
 * Each message: the peer is authenticated (its token) → the body is validated → the message goes
 * to the negotiation's workflow as an Update, whose validator consults the state table; the
 * answer is sent only once the Update is accepted. Illegal transition → 400, unknown → 404.
 */
import { createHash } from 'node:crypto';
import type Router from '@koa/router';
import type Koa from 'koa';
import type Joi from 'joi';
import {
  WithStartWorkflowOperation,
  WorkflowExecutionAlreadyStartedError,
  WorkflowNotFoundError,
  WorkflowUpdateFailedError,
} from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import type { Services } from '../services.js';
import { callbackProblem } from './callback.js';
import { negotiationStore } from '../../db/negotiations.js';
import { evidenceStore } from '../../db/evidence.js';
import { offerStore } from '../../db/offers.js';
import { policyStore } from '../../db/policies.js';
import { productStore } from '../../db/products.js';
import { agreementStore } from '../../db/agreements.js';
import {
  buildingDataContextUrl,
  negotiationAck,
  negotiationError,
  wireRules,
  type OdrlOffer,
} from '../../domain/dsp.js';
import {
  DEFAULT_RESPONSE_TIMEOUT_MS,
  isHarmlessRepeat,
  isTerminal,
  negotiationMessageKind,
  otherParty,
  type NegotiationMessage,
} from '../../domain/negotiation.js';
import { toOdrl } from '../../domain/policy.js';
import { permits, type PolicyContext } from '../../domain/policy-evaluation.js';
import {
  DSP_REFUSALS,
  dspMessageUpdate,
  type NegotiationAck,
  type NegotiationInput,
} from '../../workflows/negotiation-messages.js';
import {
  contractAgreementSchema,
  contractOfferSchema,
  contractRequestSchema,
  eventSchema,
  messageShapeProblem,
  terminationSchema,
  verificationSchema,
} from './schemas.js';

/** A DSP refusal: status and a ContractNegotiationError body. */
export class DspError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    readonly reasons: string[],
    readonly pids: { providerPid?: string | null; consumerPid?: string | null } = {},
  ) {
    super(reasons.join('; '));
  }
}

export interface Peer {
  did: string;
}

/** The authenticated caller (api/middleware/connector-auth.ts). */
export const peerOf = (ctx: Koa.Context): Peer => ctx.state.peer as Peer;

/** A DSP message checked against its schema and the shapes no workflow could take; 400 otherwise. */
export function validateMessage(schema: Joi.Schema, body: unknown): Record<string, unknown> {
  const { error, value } = schema.validate(body, { abortEarly: true });
  const b = (body ?? {}) as { providerPid?: string; consumerPid?: string };
  if (error) throw new DspError(400, 'invalid_message', [error.message], b);
  const problem = messageShapeProblem(value);
  if (problem) throw new DspError(400, 'invalid_message', [problem], b);
  return value as Record<string, unknown>;
}

/** Every inbound message is evidence before it is acted on; its entry id travels with it. */
async function recordInbound(
  services: Services,
  ctx: Koa.Context,
  processId: string,
  body: Record<string, unknown>,
) {
  const entry = await evidenceStore(services.db).append({
    kind: 'dsp.inbound',
    process_id: processId,
    payload: { from: peerOf(ctx).did, method: ctx.method, path: ctx.path, message: body },
  });
  return entry.id;
}

/**
 * The workflow of a negotiation the counterparty opened (its request to us as provider, its
 * offer to us as consumer): the same opening message always finds the same workflow and the
 * same pid of ours.
 */
function openedIdentity(kind: 'provider' | 'consumer', peerDid: string, peerPid: string) {
  const digest = createHash('sha256').update(`${peerDid}\n${peerPid}`).digest('hex');
  const uuid = `${digest.slice(0, 8)}-${digest.slice(8, 12)}-4${digest.slice(13, 16)}-a${digest.slice(17, 20)}-${digest.slice(20, 32)}`;
  const prefix = kind === 'provider' ? 'negotiation/provider/' : 'negotiation/consumer/offered-';
  return { workflowId: `${prefix}${digest.slice(0, 32)}`, pid: `urn:uuid:${uuid}` };
}

/**
 * The Update id of an inbound message: Temporal answers a second Update with the same id (in
 * flight or done) with the first one's outcome, so a repeat has no second effect.
 */
const updateIdOf = (kind: NegotiationMessage, body: Record<string, unknown>) =>
  typeof body['@id'] === 'string'
    ? `dsp-${createHash('sha256').update(`${kind}\n${body['@id']}`).digest('hex').slice(0, 40)}`
    : undefined;

/** A validator's refusal (illegal transition, another process, another offer) as a DSP 400. */
function refusal(err: unknown, pids: { providerPid?: string | null; consumerPid?: string | null }) {
  if (!(err instanceof WorkflowUpdateFailedError)) return null;
  const cause = err.cause;
  const code = cause instanceof ApplicationFailure && cause.type ? DSP_REFUSALS[cause.type] : undefined;
  return code ? new DspError(400, code, [(cause as ApplicationFailure).message], pids) : null;
}

export function dspNegotiationRoutes(
  router: Router,
  services: Services,
  policyContext: (ctx: Koa.Context) => Promise<PolicyContext>,
): void {
  const { db } = services;
  const temporal = () => {
    if (!services.temporal)
      throw new DspError(503, 'unavailable', ['the connector cannot process messages right now']);
    return services.temporal;
  };

  /** An inbound message on an existing negotiation, found by our pid and owned by this peer. */
  async function onMessage(
    ctx: Koa.Context,
    schema: Joi.Schema,
    expectedRole: 'provider' | 'consumer' | null,
  ) {
    const peer = peerOf(ctx);
    const id = ctx.params.id!;
    const body = validateMessage(schema, ctx.request.body);
    const record = await negotiationStore(db).get(id);
    // Unknown, or not a negotiation with this caller: 404 either way (nothing is revealed).
    if (!record || record.counterparty_did !== peer.did || (expectedRole && record.role !== expectedRole)) {
      throw new DspError(404, 'not_found', [`no negotiation ${id}`], body);
    }
    const ours = record.role === 'provider' ? body.providerPid : body.consumerPid;
    const pids = { providerPid: record.provider_pid, consumerPid: record.consumer_pid };
    if (ours !== id)
      throw new DspError(400, 'pid_mismatch', ['the message names another process than its address'], body);
    const kind = negotiationMessageKind(body) as NegotiationMessage;
    if (kind === 'ContractAgreementMessage') {
      // An agreement id is the key of the agreement everywhere: one already stored is not reused.
      const agreementId = (body.agreement as { '@id': string })['@id'];
      const taken = await agreementStore(db).get(agreementId);
      if (taken && taken.negotiation_id !== record.id)
        throw new DspError(400, 'invalid_message', [`agreement ${agreementId} exists already`], pids);
    }
    const evidenceId = await recordInbound(services, ctx, record.id, body);
    let ack: NegotiationAck;
    try {
      ack = await temporal()
        .workflow.getHandle(record.workflow_id)
        .executeUpdate(dspMessageUpdate, {
          args: [{ kind, body, messageId: typeof body['@id'] === 'string' ? body['@id'] : null, evidenceId }],
          updateId: updateIdOf(kind, body),
        });
    } catch (err) {
      // The workflow has ended: a repeat of the end gets the state, as while it ran; anything else is illegal.
      if (err instanceof WorkflowNotFoundError) {
        const now = (await negotiationStore(db).get(id)) ?? record;
        if (isTerminal(now.state)) {
          if (isHarmlessRepeat(now.state, kind, otherParty(now.role))) {
            ctx.status = 200;
            ctx.body = negotiationAck(now.provider_pid ?? '', now.consumer_pid, now.state);
            return;
          }
          throw new DspError(400, 'invalid_transition', [`the negotiation has ended (${now.state})`], pids);
        }
      }
      const refused = refusal(err, pids);
      if (refused) throw refused;
      throw err;
    }
    ctx.status = 200;
    ctx.body = negotiationAck(ack.providerPid ?? '', ack.consumerPid, ack.state);
  }

  /** A callbackAddress we can use for this peer, or a 400 (dsp-edc.md §1.7: an unrecoverable error). */
  async function checkCallback(address: string, peerDid: string, body: Record<string, unknown>) {
    const problem = await callbackProblem(address, peerDid, services.connector.allowLoopbackPeers ?? false);
    if (problem) throw new DspError(400, 'invalid_callback', [problem], body);
  }

  /**
   * Starts (or finds) the workflow of a negotiation the counterparty opens, with its first
   * message as the Update: answered 201 once the message is handled. A repeat of the opening
   * message (same @id) gets the same answer; another opening message for the same process, or
   * one for a process that has ended, is refused.
   */
  async function open(
    ctx: Koa.Context,
    workflowId: string,
    input: NegotiationInput,
    kind: NegotiationMessage,
    body: Record<string, unknown>,
  ) {
    const pids = { providerPid: input.providerPid, consumerPid: input.consumerPid };
    const evidenceId = await recordInbound(services, ctx, input.id, body);
    let ack: NegotiationAck;
    try {
      ack = await temporal().workflow.executeUpdateWithStart(dspMessageUpdate, {
        args: [{ kind, body, messageId: typeof body['@id'] === 'string' ? body['@id'] : null, evidenceId }],
        updateId: updateIdOf(kind, body),
        startWorkflowOperation: new WithStartWorkflowOperation('negotiation', {
          workflowId,
          taskQueue: services.taskQueue,
          args: [input],
          workflowIdConflictPolicy: 'USE_EXISTING',
          workflowIdReusePolicy: 'REJECT_DUPLICATE',
        }),
      });
    } catch (err) {
      if (err instanceof WorkflowExecutionAlreadyStartedError) {
        const pid = kind === 'ContractRequestMessage' ? 'consumerPid' : 'providerPid';
        throw new DspError(
          400,
          'invalid_transition',
          [
            `the ${pid} ${String(body[pid])} belongs to a negotiation that has ended; a new one needs a new ${pid}`,
          ],
          pids,
        );
      }
      const refused = refusal(err, pids);
      if (refused) throw refused;
      throw err;
    }
    ctx.status = 201;
    ctx.body = negotiationAck(ack.providerPid ?? '', ack.consumerPid, ack.state);
  }

  /** What a negotiation of ours is told by the connector's configuration. */
  const settings = () => ({
    ourDid: services.connector.did,
    ourAddress: services.connector.dspAddress,
    ourContext: buildingDataContextUrl(services.connector.publicUrl),
    approvalTimeoutMs: services.connector.approvalTimeoutMs,
    responseTimeoutMs: services.connector.responseTimeoutMs ?? DEFAULT_RESPONSE_TIMEOUT_MS,
    retry: services.connector.deliveryRetry,
  });

  // Provider: a consumer's initial request starts a negotiation (update-with-start).
  router.post('/negotiations/request', async function receiveContractRequest(ctx) {
    const peer = peerOf(ctx);
    const body = validateMessage(contractRequestSchema, ctx.request.body);
    if (body.providerPid)
      throw new DspError(400, 'invalid_message', ['an initial request has no providerPid'], body);
    await checkCallback(String(body.callbackAddress), peer.did, body);
    const offerRef = body.offer as OdrlOffer;
    const offer = await offerStore(db).get(offerRef['@id']);
    // An offer the caller may not see (its access policy) is as unknown to it as a missing one.
    const access = offer ? await policyStore(db).get(offer.access_policy_id) : undefined;
    if (!offer || !access || !permits(access, await policyContext(ctx))) {
      throw new DspError(400, 'unknown_offer', [`no offer ${offerRef['@id']}`], body);
    }
    const [product, contract] = await Promise.all([
      productStore(db).get(offer.asset_id),
      policyStore(db).get(offer.contract_policy_id),
    ]);
    if (!product || !contract)
      throw new DspError(400, 'unknown_offer', [`offer ${offer.id} is not available`], body);
    if (offerRef.target !== undefined && offerRef.target !== product.id)
      throw new DspError(400, 'unknown_offer', [`offer ${offer.id} is for dataset ${product.id}`], body);

    const consumerPid = String(body.consumerPid);
    const { workflowId, pid: providerPid } = openedIdentity('provider', peer.did, consumerPid);
    const odrl = toOdrl(offer.id, contract);
    const input: NegotiationInput = {
      ...settings(),
      role: 'provider',
      id: providerPid,
      consumerPid,
      providerPid,
      counterpartyDid: peer.did,
      counterpartyAddress: String(body.callbackAddress),
      offer: { '@id': offer.id, '@type': 'Offer', target: product.id, ...wireRules(odrl) },
      datasetId: product.id,
      offerId: offer.id,
      purpose: null,
      connectionAlias: null,
      narrowing: (offerRef as { narrowing?: Record<string, unknown> }).narrowing ?? null,
      approval: offer.approval,
    };
    await open(ctx, workflowId, input, 'ContractRequestMessage', body);
  });

  // Consumer: a provider's initial offer opens a negotiation; our operator accepts or terminates it.
  router.post('/negotiations/offers', async function receiveContractOffer(ctx) {
    const peer = peerOf(ctx);
    const body = validateMessage(contractOfferSchema, ctx.request.body);
    if (body.consumerPid)
      throw new DspError(400, 'invalid_message', ['an initial offer has no consumerPid'], body);
    await checkCallback(String(body.callbackAddress), peer.did, body);
    const offer = body.offer as OdrlOffer;
    const providerPid = String(body.providerPid);
    const { workflowId, pid: consumerPid } = openedIdentity('consumer', peer.did, providerPid);
    const input: NegotiationInput = {
      ...settings(),
      role: 'consumer',
      initiatedBy: 'provider',
      id: consumerPid,
      consumerPid,
      providerPid,
      counterpartyDid: peer.did,
      counterpartyAddress: String(body.callbackAddress),
      offer: { ...offer, '@type': 'Offer' },
      datasetId: typeof offer.target === 'string' ? offer.target : null,
      offerId: offer['@id'],
      purpose: null,
      connectionAlias: null,
      narrowing: null,
      approval: 'manual',
    };
    await open(ctx, workflowId, input, 'ContractOfferMessage', body);
  });

  router.get('/negotiations/:id', async function readNegotiation(ctx) {
    const record = await negotiationStore(db).get(ctx.params.id!);
    if (!record || record.counterparty_did !== peerOf(ctx).did)
      throw new DspError(404, 'not_found', [`no negotiation ${ctx.params.id}`]);
    ctx.body = negotiationAck(
      record.provider_pid ?? '',
      record.consumer_pid,
      record.state === 'INITIAL' ? 'REQUESTED' : record.state,
    );
  });

  // Provider side.
  router.post('/negotiations/:id/request', (ctx) => onMessage(ctx, contractRequestSchema, 'provider'));
  router.post('/negotiations/:id/agreement/verification', (ctx) =>
    onMessage(ctx, verificationSchema, 'provider'),
  );
  // Either side (our pid tells which).
  router.post('/negotiations/:id/events', (ctx) => onMessage(ctx, eventSchema, null));
  router.post('/negotiations/:id/termination', (ctx) => onMessage(ctx, terminationSchema, null));
  // Consumer side (callback).
  router.post('/negotiations/:id/offers', (ctx) => onMessage(ctx, contractOfferSchema, 'consumer'));
  router.post('/negotiations/:id/agreement', (ctx) => onMessage(ctx, contractAgreementSchema, 'consumer'));
}

/** Renders DspError (and anything unexpected) as a ContractNegotiationError. */
export function dspErrors(logger: Services['logger']) {
  return async function renderDspErrors(ctx: Koa.Context, next: Koa.Next) {
    try {
      await next();
      if (ctx.status === 404 && ctx.body === undefined)
        throw new DspError(404, 'not_found', [`no endpoint ${ctx.method} ${ctx.path}`]);
    } catch (err) {
      const e =
        err instanceof DspError
          ? err
          : typeof (err as { status?: number }).status === 'number' &&
              (err as { status: number }).status < 500
            ? new DspError(
                (err as { status: number }).status,
                (err as { code?: string }).code ?? 'invalid_request',
                [(err as Error).message],
              )
            : undefined;
      if (e) {
        ctx.status = e.status;
        ctx.body = negotiationError(e.pids, e.code, e.reasons);
        return;
      }
      logger.error({ err, path: ctx.path }, 'unhandled protocol error');
      ctx.status = 500;
      ctx.body = negotiationError({}, 'internal', [
        `internal error (request ${String(ctx.state.requestId)})`,
      ]);
    }
  };
}
