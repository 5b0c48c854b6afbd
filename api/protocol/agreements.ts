/**
 * Ending an agreement (not part of DSP; our AgreementTerminationMessage, docs/transfers.md):
 * `POST /dsp/agreements/{id}/termination` from the other party of the agreement, with its
 * connector token. The agreement ends on our side (the data plane stops serving it at once, the
 * tokens of its transfers are revoked) and every transfer under it ends; the answer is the same
 * however often the message comes. Both roles serve it: either party may end an agreement.
 */
import { createHash } from 'node:crypto';
import type Router from '@koa/router';
import type Koa from 'koa';
import { WithStartWorkflowOperation } from '@temporalio/client';
import type { Services } from '../services.js';
import { DspError } from './negotiations.js';
import { agreementStore, type AgreementRecord } from '../../db/agreements.js';
import { agreementEnds } from '../../db/transfers.js';
import { negotiationStore } from '../../db/negotiations.js';
import { evidenceStore } from '../../db/evidence.js';
import { DSP_BASE_PATH } from '../../domain/dsp.js';
import { agreementError, agreementTerminationAnswer } from '../../domain/transfer.js';
import {
  endAgreementUpdate,
  type AgreementEndAck,
  type AgreementTerminationInput,
  type EndAgreement,
} from '../../workflows/transfer-messages.js';
import { agreementTerminationSchema } from './transfer-schemas.js';
import { messageShapeProblem } from './schemas.js';

const AGREEMENTS_PATH = `${DSP_BASE_PATH}/agreements`;

/** The other party of an agreement, from our side. */
export const counterpartyOf = (a: AgreementRecord) =>
  a.role === 'provider' ? a.consumer_did : a.provider_did;

/**
 * Ends an agreement through its termination workflow (one per agreement and side): answers once
 * the agreement has ended here and its transfers were told to end; when we end it, the workflow
 * then tells the counterparty through the outbox.
 */
export async function endAgreement(
  services: Services,
  agreement: AgreementRecord,
  e: EndAgreement,
): Promise<AgreementEndAck> {
  if (!services.temporal)
    throw new DspError(503, 'unavailable', ['the connector cannot process messages right now']);
  const negotiation = await negotiationStore(services.db).get(agreement.negotiation_id);
  const input: AgreementTerminationInput = {
    agreementId: agreement.id,
    role: agreement.role,
    counterpartyDid: counterpartyOf(agreement),
    counterpartyAddress: negotiation?.counterparty_address ?? null,
    retry: services.connector.deliveryRetry,
  };
  const digest = createHash('sha256').update(agreement.id).digest('hex').slice(0, 32);
  return services.temporal.workflow.executeUpdateWithStart(endAgreementUpdate, {
    args: [e],
    startWorkflowOperation: new WithStartWorkflowOperation('agreementTermination', {
      workflowId: `agreement-termination/${agreement.role}/${digest}`,
      taskQueue: services.taskQueue,
      args: [input],
      workflowIdConflictPolicy: 'USE_EXISTING',
    }),
  });
}

export function dspAgreementRoutes(router: Router, services: Services): void {
  const { db } = services;

  router.post('/agreements/:id/termination', async function receiveAgreementTermination(ctx) {
    const peer = ctx.state.peer as { did: string };
    const id = ctx.params.id!;
    const { error, value } = agreementTerminationSchema.validate(ctx.request.body, { abortEarly: true });
    if (error) throw new DspError(400, 'invalid_message', [error.message]);
    // What a text column cannot hold would fail the end's activity over and over.
    const problem = messageShapeProblem(value);
    if (problem) throw new DspError(400, 'invalid_message', [problem]);
    const body = value as { agreementId: string; code?: string; reason?: string[] };
    if (body.agreementId !== id)
      throw new DspError(400, 'id_mismatch', ['the message names another agreement than its address']);
    const agreement = await agreementStore(db).get(id);
    // Unknown, or not an agreement with this caller: 404 either way (nothing is revealed).
    if (!agreement || counterpartyOf(agreement) !== peer.did)
      throw new DspError(404, 'not_found', [`no agreement ${id} with you`]);
    const ended = (await agreementEnds(db).get(id)) ?? (await endByCounterparty(ctx, agreement, body));
    ctx.status = 200;
    ctx.body = agreementTerminationAnswer({
      agreementId: id,
      endedAt: ended.endedAt,
      endedBy: ended.endedBy,
    });
  });

  async function endByCounterparty(
    ctx: Koa.Context,
    agreement: AgreementRecord,
    body: { code?: string; reason?: string[] },
  ) {
    const peer = ctx.state.peer as { did: string };
    const entry = await evidenceStore(db).append({
      kind: 'dsp.inbound',
      process_id: agreement.id,
      payload: { from: peer.did, method: ctx.method, path: ctx.path, message: ctx.request.body },
    });
    const reason = [body.code, ...(body.reason ?? [])].filter(Boolean).join(': ') || null;
    return endAgreement(services, agreement, {
      by: 'counterparty',
      code: body.code ?? 'terminated',
      reason,
      actor: peer.did,
      evidenceId: entry.id,
    });
  }
}

/**
 * Refusals on the agreement endpoints (including authentication, which runs before the routes)
 * as AgreementError bodies (`@context`, `@type`, `code`, `reason[]`): register before the peer
 * authentication.
 */
export function agreementErrors() {
  return async function renderAgreementErrors(ctx: Koa.Context, next: Koa.Next) {
    if (!ctx.path.startsWith(`${AGREEMENTS_PATH}/`)) return next();
    try {
      await next();
      if (ctx.status === 404 && ctx.body === undefined)
        throw new DspError(404, 'not_found', [`no endpoint ${ctx.method} ${ctx.path}`]);
    } catch (err) {
      if (!(err instanceof DspError)) throw err;
      const segment = ctx.path.slice(AGREEMENTS_PATH.length + 1).split('/')[0] ?? '';
      let agreementId: string | null = null;
      try {
        agreementId = decodeURIComponent(segment) || null;
      } catch {
        // not a valid escape: no id to name
      }
      ctx.status = err.status;
      ctx.body = agreementError(agreementId, err.code, err.reasons);
    }
  };
}
