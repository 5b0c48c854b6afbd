/**
 * Transfers for operators: start one (consumer, from an agreement), list, read, and act on one
 * (start one awaiting its start, suspend, resume, complete, terminate); and ending an agreement (either side), which ends every
 * transfer under it and tells the counterparty.
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
import { dateTime } from '../validation.js';
import { ApiError, conflict, invalidRequest, notFound } from '../../domain/errors.js';
import type { Party } from '../../domain/negotiation.js';
import {
  DEFAULT_FORMAT,
  SUPPORTED_FORMATS,
  TRANSFER_STATES,
  isTransferAction,
  isTransferEnded,
  type TransferState,
} from '../../domain/transfer.js';
import { transferStore, agreementEnds, type TransferRecord } from '../../db/transfers.js';
import { agreementStore } from '../../db/agreements.js';
import { negotiationStore } from '../../db/negotiations.js';
import { outboxStore } from '../../db/outbox.js';
import { maskDataAddress } from '../../gateway/dataplane/access.js';
import {
  ILLEGAL_TRANSFER_TRANSITION,
  transferDecisionUpdate,
  transferStartedUpdate,
  type TransferInput,
} from '../../workflows/transfer-messages.js';
import { counterpartyOf, endAgreement } from '../protocol/agreements.js';
import type { Caller } from '../middleware/authenticate.js';

/** A connection alias: lower-case letters, digits and dashes (it becomes a gateway path segment). */
export const CONNECTION_ALIAS = /^[a-z0-9][a-z0-9-]{0,62}$/;

const transferOutput = Joi.object({
  id: Joi.string().required(),
  role: Joi.string().valid('provider', 'consumer').required(),
  state: Joi.string()
    .valid(...TRANSFER_STATES)
    .required(),
  consumer_pid: Joi.string().required(),
  provider_pid: Joi.string().allow(null).required(),
  agreement_id: Joi.string().required(),
  counterparty_did: Joi.string().required(),
  format: Joi.string().required(),
  history: Joi.array().items(historyEntry).required(),
  outbox: Joi.array().items(Joi.object().unknown(true)).required(),
  dataset_id: Joi.string().allow(null),
  counterparty_address: Joi.string().allow(null),
  connection_alias: Joi.string().allow(null),
  error: Joi.string().allow(null),
  counterparty_name: Joi.string().allow(null),
  data_address: Joi.object().unknown(true).allow(null).description('where the data is; token masked'),
  dataplane_id: Joi.string().allow(null),
  dataplane_endpoint: Joi.string().allow(null),
  delegation_id: Joi.string().allow(null),
  flow_state: Joi.string().allow(null),
  created_at: dateTime().required(),
  updated_at: dateTime().required(),
});

interface StartInput {
  agreement_id: string;
  format: string;
  connection_alias?: string | null;
}

/** The counterparty's name in the authority's registry (cached there); null when unknown or unreachable. */
async function counterpartyName(services: Services, did: string): Promise<string | null> {
  try {
    return (await services.authority?.member(did))?.name ?? null;
  } catch {
    return null;
  }
}

/** A transfer as operators see it: the token in its data address masked, history and undelivered messages. */
export async function presentTransfer(services: Services, record: TransferRecord) {
  const { db } = services;
  const [history, outbox, name] = await Promise.all([
    transferStore(db).history(record.id),
    outboxStore(db).undelivered(record.id),
    counterpartyName(services, record.counterparty_did),
  ]);
  const { workflow_id: _w, version: _v, ...fields } = record;
  return {
    ...fields,
    data_address: maskDataAddress(record.data_address),
    counterparty_name: name,
    history,
    outbox,
  };
}

function illegalAction(err: unknown): ApiError | null {
  if (!(err instanceof WorkflowUpdateFailedError)) return null;
  const cause = err.cause;
  return cause instanceof ApplicationFailure && cause.type === ILLEGAL_TRANSFER_TRANSITION
    ? conflict(cause.message)
    : null;
}

const by = (caller: Caller | undefined) => (caller ? `${caller.name} (${caller.id})` : 'unknown');

/** Runs an operator action on a transfer's workflow; answers with the read model it wrote. */
export async function actOnTransfer(
  services: Services,
  id: string,
  action: string,
  caller: Caller | undefined,
  reason: string | null = null,
) {
  const record = await transferStore(services.db).get(id);
  if (!record) throw notFound('transfer', id);
  if (!isTransferAction(action)) throw notFound('transfer action', action);
  if (!services.temporal) throw new ApiError('unavailable', 'Temporal is not reachable');
  try {
    await services.temporal.workflow
      .getHandle(record.workflow_id)
      .executeUpdate(transferDecisionUpdate, { args: [{ action, by: by(caller), reason }] });
  } catch (err) {
    // The workflow has ended: nothing is possible any more.
    if (err instanceof WorkflowNotFoundError && isTransferEnded(record.state))
      throw conflict(`a ${record.state.toLowerCase()} transfer cannot ${action}: it has ended`);
    const mapped = illegalAction(err);
    if (mapped) throw mapped;
    throw err;
  }
  return presentTransfer(services, (await transferStore(services.db).get(id))!);
}

export function transferRoutes(services: Services) {
  const { db } = services;
  const temporal = () => {
    if (!services.temporal) throw new ApiError('unavailable', 'Temporal is not reachable');
    return services.temporal;
  };

  return [
    route<never, never, StartInput>({
      method: 'post',
      path: '/transfers',
      summary: 'Start a transfer under an agreement (we are the consumer)',
      tag: 'transfers',
      role: 'operator',
      body: Joi.object({
        agreement_id: Joi.string().min(1).max(512).required(),
        format: Joi.string()
          .valid(...SUPPORTED_FORMATS)
          .default(DEFAULT_FORMAT),
        connection_alias: Joi.string().pattern(CONNECTION_ALIAS).allow(null),
      }),
      response: transferOutput,
      status: 201,
      errors: ['conflict'],
      async handler({ body }) {
        const agreement = await agreementStore(db).get(body.agreement_id);
        if (!agreement) throw notFound('agreement', body.agreement_id);
        if (agreement.role !== 'consumer')
          throw invalidRequest(
            'we are the provider of this agreement; its consumer starts transfers',
            'agreement_id',
          );
        if (agreement.state !== 'active') throw conflict(`agreement ${agreement.id} has ended`);
        const negotiation = await negotiationStore(db).get(agreement.negotiation_id);
        if (!negotiation?.counterparty_address)
          throw conflict(`the provider's address of agreement ${agreement.id} is not known`);
        const uuid = randomUUID();
        const consumerPid = `urn:uuid:${uuid}`;
        const input: TransferInput = {
          role: 'consumer',
          id: consumerPid,
          consumerPid,
          providerPid: null,
          agreementId: agreement.id,
          datasetId: agreement.dataset_id,
          format: body.format,
          ourDid: services.connector.did,
          ourAddress: services.connector.dspAddress,
          counterpartyDid: agreement.provider_did,
          counterpartyAddress: negotiation.counterparty_address,
          connectionAlias: body.connection_alias ?? null,
          dataplaneEndpoint: null,
          retry: services.connector.deliveryRetry,
          historyLimit: services.connector.transferHistoryLimit ?? null,
        };
        await temporal().workflow.executeUpdateWithStart(transferStartedUpdate, {
          startWorkflowOperation: new WithStartWorkflowOperation('transfer', {
            workflowId: `transfer/consumer/${uuid}`,
            taskQueue: services.taskQueue,
            args: [input],
            workflowIdConflictPolicy: 'FAIL',
          }),
        });
        return presentTransfer(services, (await transferStore(db).get(consumerPid))!);
      },
    }),
    route<
      never,
      {
        cursor?: string;
        limit: number;
        role?: Party;
        state?: TransferState;
        agreement_id?: string;
        connection_alias?: string;
      }
    >({
      method: 'get',
      path: '/transfers',
      summary: 'List transfers (filter by role, state, agreement and connection)',
      tag: 'transfers',
      role: 'viewer',
      query: pageQuery.keys({
        role: Joi.string().valid('provider', 'consumer'),
        state: Joi.string().valid(...TRANSFER_STATES),
        agreement_id: Joi.string().min(1),
        connection_alias: Joi.string().min(1),
      }),
      response: pageOf(transferOutput),
      async handler({ query }) {
        const { cursor: _c, limit: _l, ...filter } = query;
        const page = await transferStore(db).list(filter, toPageRequest(query));
        const items = [];
        for (const r of page.items) items.push(await presentTransfer(services, r));
        return { items, next_cursor: page.next_cursor };
      },
    }),
    route<{ id: string }>({
      method: 'get',
      path: '/transfers/:id',
      summary: 'Read a transfer with its history and undelivered messages (token masked)',
      tag: 'transfers',
      role: 'viewer',
      params: idParams,
      response: transferOutput,
      async handler({ params }) {
        const record = await transferStore(db).get(params.id);
        if (!record) throw notFound('transfer', params.id);
        return presentTransfer(services, record);
      },
    }),
    route<{ id: string; action: string }>({
      method: 'post',
      path: '/transfers/:id/:action',
      summary:
        'Start (provider, a transfer awaiting its start), suspend, resume, complete or terminate a transfer',
      tag: 'transfers',
      role: 'operator',
      params: idParams.keys({ action: Joi.string().max(64).required() }),
      response: transferOutput,
      errors: ['conflict'],
      handler: ({ params, caller }) => actOnTransfer(services, params.id, params.action, caller),
    }),
    route<{ id: string }, never, { reason?: string | null }>({
      method: 'post',
      path: '/agreements/:id/terminate',
      summary: 'End an agreement: its transfers end, the counterparty is told',
      tag: 'agreements',
      role: 'operator',
      params: idParams,
      body: Joi.object({
        // Stored with the agreement's end (a text column cannot hold NUL) and sent to the counterparty.
        reason: Joi.string()
          .max(500)
          // eslint-disable-next-line no-control-regex -- NUL is exactly what is refused
          .pattern(/^[^\u0000]*$/, 'text')
          .allow(null)
          .messages({ 'string.pattern.name': '{{#label}} must not contain a NUL character' }),
      }),
      errors: ['conflict'],
      async handler({ params, body, caller }) {
        const agreement = await agreementStore(db).get(params.id);
        if (!agreement) throw notFound('agreement', params.id);
        if (agreement.state !== 'active') throw conflict(`agreement ${agreement.id} has ended already`);
        temporal();
        const ended = await endAgreement(services, agreement, {
          by: 'us',
          code: 'terminated',
          reason: body.reason ?? `ended by the ${agreement.role}`,
          actor: by(caller),
          evidenceId: null,
        });
        const end = (await agreementEnds(db).get(agreement.id))!;
        return {
          ...(await agreementStore(db).get(agreement.id))!,
          counterparty_did: counterpartyOf(agreement),
          ended_at: end.endedAt,
          ended_by: end.endedBy,
          end_reason: end.reason,
          transfers: ended.transfers,
        };
      },
    }),
  ];
}
