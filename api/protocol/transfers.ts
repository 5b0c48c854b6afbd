/**
 * DSP 2025-1 transfer process endpoints, both roles, below the DSP base (dsp-edc.md §1.5).
 * Provider: POST transfers/request (201), POST transfers/:pid/{start,suspension,completion,
 * termination}, GET transfers/:pid. Consumer (our callback address is the same base): POST
 * transfers/:cid/{start,suspension,completion,termination}, GET transfers/:cid.
 *
 * Each message: the peer is authenticated → the body is validated → it is recorded as evidence
 * → it goes to the transfer's workflow as an Update, whose validator consults the state table;
 * the answer is sent once the Update has completed. Illegal transition → 400, unknown → 404,
 * both as TransferError bodies.
 */
import { createHash } from 'node:crypto';
import type Router from '@koa/router';
import type Koa from 'koa';
import type Joi from 'joi';
import {
  WithStartWorkflowOperation,
  WorkflowNotFoundError,
  WorkflowUpdateFailedError,
} from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import type { Services } from '../services.js';
import { DspError, peerOf, validateMessage, type Peer } from './negotiations.js';
import { callbackProblem } from './callback.js';
import { transferStore, type TransferRecord } from '../../db/transfers.js';
import { agreementStore } from '../../db/agreements.js';
import { offerStore } from '../../db/offers.js';
import { evidenceStore } from '../../db/evidence.js';
import { DSP_BASE_PATH } from '../../domain/dsp.js';
import {
  SUPPORTED_FORMATS,
  isHarmlessTransferRepeat,
  isTransferEnded,
  transferError,
  transferMessageKind,
  transferProcessAck,
  withTokenDigest,
  type TransferMessage,
} from '../../domain/transfer.js';
import { tokenDigest } from '../../gateway/dataplane/access.js';
import {
  ILLEGAL_TRANSFER_TRANSITION,
  transferMessageUpdate,
  type TransferAck,
  type TransferInput,
} from '../../workflows/transfer-messages.js';
import {
  transferCompletionSchema,
  transferRequestSchema,
  transferStartSchema,
  transferSuspensionSchema,
  transferTerminationSchema,
} from './transfer-schemas.js';

const TRANSFERS_PATH = `${DSP_BASE_PATH}/transfers`;

/** The same request (same consumer, same consumerPid) always finds the same workflow and providerPid. */
function providerIdentity(consumerDid: string, consumerPid: string) {
  const digest = createHash('sha256').update(`transfer\n${consumerDid}\n${consumerPid}`).digest('hex');
  const uuid = `${digest.slice(0, 8)}-${digest.slice(8, 12)}-4${digest.slice(13, 16)}-a${digest.slice(17, 20)}-${digest.slice(20, 32)}`;
  return { workflowId: `transfer/provider/${digest.slice(0, 32)}`, providerPid: `urn:uuid:${uuid}` };
}

/**
 * The Update id of an inbound message: Temporal answers a repeat (in flight or done) with the
 * first one's outcome and keeps it out of the workflow's history.
 */
const updateIdOf = (kind: TransferMessage, body: Record<string, unknown>) =>
  typeof body['@id'] === 'string'
    ? `dsp-${createHash('sha256').update(`${kind}\n${body['@id']}`).digest('hex').slice(0, 40)}`
    : undefined;

function illegal(err: unknown): string | null {
  if (!(err instanceof WorkflowUpdateFailedError)) return null;
  const cause = err.cause;
  return cause instanceof ApplicationFailure && cause.type === ILLEGAL_TRANSFER_TRANSITION
    ? cause.message
    : null;
}

const peerPidName = (r: TransferRecord) => (r.role === 'provider' ? 'consumerPid' : 'providerPid');

const ackOf = (r: TransferRecord) => transferProcessAck(r.provider_pid ?? '', r.consumer_pid, r.state);

export function dspTransferRoutes(router: Router, services: Services): void {
  const { db } = services;
  const temporal = () => {
    if (!services.temporal)
      throw new DspError(503, 'unavailable', ['the connector cannot process messages right now']);
    return services.temporal;
  };

  async function recordInbound(ctx: Koa.Context, processId: string, body: Record<string, unknown>) {
    const entry = await evidenceStore(db).append({
      kind: 'dsp.inbound',
      process_id: processId,
      payload: {
        from: peerOf(ctx).did,
        method: ctx.method,
        path: ctx.path,
        // A start's token is kept as its digest only (domain/transfer.ts withTokenDigest).
        message: withTokenDigest(body, tokenDigest),
      },
    });
    return entry.id;
  }

  /**
   * Whether we may serve this request: an active agreement of ours as provider with this
   * consumer, and a format we serve. Another party's agreement is as unknown as a missing one.
   */
  async function refuseUnservable(peer: Peer, body: Record<string, unknown>) {
    const agreementId = String(body.agreementId);
    const agreement = await agreementStore(db).get(agreementId);
    if (
      !agreement ||
      agreement.role !== 'provider' ||
      agreement.provider_did !== services.connector.did ||
      agreement.consumer_did !== peer.did
    ) {
      throw new DspError(400, 'unknown_agreement', [`no agreement ${agreementId} with you`], body);
    }
    if (agreement.state !== 'active')
      throw new DspError(400, 'agreement_ended', [`agreement ${agreementId} has ended`], body);
    if (!(SUPPORTED_FORMATS as readonly string[]).includes(String(body.format))) {
      throw new DspError(
        400,
        'unsupported_format',
        [`format ${String(body.format)} is not supported; supported: ${SUPPORTED_FORMATS.join(', ')}`],
        body,
      );
    }
    return agreement;
  }

  // Provider: a consumer's request starts a transfer (update-with-start).
  router.post('/transfers/request', async function receiveTransferRequest(ctx) {
    const peer = peerOf(ctx);
    const body = validateMessage(transferRequestSchema, ctx.request.body);
    const consumerPid = String(body.consumerPid);
    // The same request again answers the same process, whatever happened since.
    const existing = await transferStore(db).findByConsumerPid('provider', peer.did, consumerPid);
    if (existing) {
      ctx.status = 201;
      ctx.body = ackOf(existing);
      return;
    }
    const agreement = await refuseUnservable(peer, body);
    // As for a negotiation: our messages for this transfer go only to the caller itself.
    const callback = String(body.callbackAddress);
    const problem = await callbackProblem(callback, peer.did, services.connector.allowLoopbackPeers ?? false);
    if (problem) throw new DspError(400, 'invalid_callback', [problem], body);
    const { workflowId, providerPid } = providerIdentity(peer.did, consumerPid);
    const input: TransferInput = {
      role: 'provider',
      id: providerPid,
      consumerPid,
      providerPid,
      agreementId: agreement.id,
      datasetId: agreement.dataset_id,
      format: String(body.format),
      ourDid: services.connector.did,
      ourAddress: services.connector.dspAddress,
      counterpartyDid: peer.did,
      counterpartyAddress: callback,
      connectionAlias: null,
      dataplaneEndpoint: `${services.connector.publicUrl}/dataplane/v1`,
      // The offer's mode when the request arrives, as for negotiations (docs/transfers.md).
      startApproval:
        agreement.offer_id && (await offerStore(db).get(agreement.offer_id))?.approval === 'stepwise'
          ? { timeoutMs: services.connector.approvalTimeoutMs }
          : null,
      retry: services.connector.deliveryRetry,
      historyLimit: services.connector.transferHistoryLimit ?? null,
    };
    const evidenceId = await recordInbound(ctx, providerPid, body);
    const ack = await temporal().workflow.executeUpdateWithStart(transferMessageUpdate, {
      args: [
        {
          kind: 'TransferRequestMessage',
          body,
          messageId: typeof body['@id'] === 'string' ? body['@id'] : null,
          evidenceId,
        },
      ],
      startWorkflowOperation: new WithStartWorkflowOperation('transfer', {
        workflowId,
        taskQueue: services.taskQueue,
        args: [input],
        workflowIdConflictPolicy: 'USE_EXISTING',
        workflowIdReusePolicy: 'REJECT_DUPLICATE',
      }),
    });
    ctx.status = 201;
    ctx.body = transferProcessAck(ack.providerPid ?? providerPid, ack.consumerPid, ack.state);
  });

  /** A message on an existing transfer, found by our pid and owned by this peer. */
  async function onMessage(ctx: Koa.Context, schema: Joi.Schema) {
    const peer = peerOf(ctx);
    const id = ctx.params.id!;
    const body = validateMessage(schema, ctx.request.body);
    const record = await transferStore(db).get(id);
    // Unknown, or not a transfer with this caller: 404 either way (nothing is revealed).
    if (!record || record.counterparty_did !== peer.did)
      throw new DspError(404, 'not_found', [`no transfer ${id}`], body);
    const pids = { providerPid: record.provider_pid, consumerPid: record.consumer_pid };
    const ours = record.role === 'provider' ? body.providerPid : body.consumerPid;
    if (ours !== id)
      throw new DspError(400, 'pid_mismatch', ['the message names another process than its address'], body);
    // DSP: once created, every message carries both pids; the peer's must be the one we know
    // (a consumer may not know the providerPid before our acknowledgement is recorded).
    const theirs = record.role === 'provider' ? body.consumerPid : body.providerPid;
    const known = record.role === 'provider' ? record.consumer_pid : record.provider_pid;
    if (known !== null && theirs !== known)
      throw new DspError(
        400,
        'pid_mismatch',
        [`the message names another ${peerPidName(record)} than this process's`],
        pids,
      );
    const kind = transferMessageKind(body) as TransferMessage;
    if (kind === 'TransferStartMessage' && record.role === 'consumer' && record.format.endsWith('-PULL')) {
      const address = body.dataAddress as { endpoint?: string } | undefined;
      if (!address?.endpoint)
        throw new DspError(
          400,
          'invalid_message',
          [
            address
              ? 'the dataAddress of a pull transfer names its endpoint'
              : 'a start message of a pull transfer carries its dataAddress',
          ],
          pids,
        );
    }
    const evidenceId = await recordInbound(ctx, record.id, body);
    let ack: TransferAck;
    try {
      ack = await temporal()
        .workflow.getHandle(record.workflow_id)
        .executeUpdate(transferMessageUpdate, {
          args: [{ kind, body, messageId: typeof body['@id'] === 'string' ? body['@id'] : null, evidenceId }],
          updateId: updateIdOf(kind, body),
        });
    } catch (err) {
      // The workflow has ended: the same final message again gets the same answer; anything else is illegal.
      if (err instanceof WorkflowNotFoundError && isTransferEnded(record.state)) {
        if (isHarmlessTransferRepeat(record.state, kind)) {
          ctx.status = 200;
          ctx.body = ackOf(record);
          return;
        }
        throw new DspError(400, 'invalid_transition', [`the transfer has ended (${record.state})`], pids);
      }
      const reason = illegal(err);
      if (reason) throw new DspError(400, 'invalid_transition', [reason], pids);
      throw err;
    }
    ctx.status = 200;
    ctx.body = transferProcessAck(ack.providerPid ?? '', ack.consumerPid, ack.state);
  }

  router.get('/transfers/:id', async function readTransfer(ctx) {
    const record = await transferStore(db).get(ctx.params.id!);
    if (!record || record.counterparty_did !== peerOf(ctx).did)
      throw new DspError(404, 'not_found', [`no transfer ${ctx.params.id}`]);
    ctx.body = transferProcessAck(
      record.provider_pid ?? '',
      record.consumer_pid,
      record.state === 'INITIAL' ? 'REQUESTED' : record.state,
    );
  });

  // Either side (our pid tells which): resume is a start message from SUSPENDED, by either party.
  router.post('/transfers/:id/start', (ctx) => onMessage(ctx, transferStartSchema));
  router.post('/transfers/:id/suspension', (ctx) => onMessage(ctx, transferSuspensionSchema));
  router.post('/transfers/:id/completion', (ctx) => onMessage(ctx, transferCompletionSchema));
  router.post('/transfers/:id/termination', (ctx) => onMessage(ctx, transferTerminationSchema));
}

/**
 * Refusals on the transfer endpoints (including authentication, which runs before the routes)
 * as TransferError bodies: register before the peer authentication.
 */
export function transferErrors() {
  return async function renderTransferErrors(ctx: Koa.Context, next: Koa.Next) {
    if (!ctx.path.startsWith(`${TRANSFERS_PATH}/`)) return next();
    try {
      await next();
      if (ctx.status === 404 && ctx.body === undefined)
        throw new DspError(404, 'not_found', [`no endpoint ${ctx.method} ${ctx.path}`]);
    } catch (err) {
      if (!(err instanceof DspError)) throw err;
      ctx.status = err.status;
      ctx.body = transferError(err.pids, err.code, err.reasons);
    }
  };
}
