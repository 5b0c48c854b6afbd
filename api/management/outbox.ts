/** Our outbound messages: read one, and resend one that was dropped or is still pending. */
import Joi from 'joi';
import { route } from '../routes.js';
import type { Services } from '../services.js';
import { ApiError, conflict, notFound } from '../../domain/errors.js';
import { outboxStore } from '../../db/outbox.js';

const outboxParams = Joi.object({ id: Joi.number().integer().min(1).required() });

export function outboxRoutes(services: Services) {
  const store = outboxStore(services.db);
  return [
    route<{ id: number }>({
      method: 'get',
      path: '/outbox/:id',
      summary: 'Read one outbound message (status, attempts, next attempt, last error)',
      tag: 'outbox',
      role: 'viewer',
      params: outboxParams,
      async handler({ params }) {
        const row = await store.get(params.id);
        if (!row) throw notFound('outbox message', String(params.id));
        const { body: _body, ...fields } = row;
        return fields;
      },
    }),
    route<{ id: number }>({
      method: 'post',
      path: '/outbox/:id/resend',
      summary: 'Resend a dropped or pending message (a delivered one is not sent again)',
      tag: 'outbox',
      role: 'operator',
      params: outboxParams,
      status: 202,
      errors: ['conflict'],
      async handler({ params }) {
        const before = await store.get(params.id);
        if (!before) throw notFound('outbox message', String(params.id));
        if (before.status === 'delivered')
          throw conflict(`message ${params.id} was delivered at ${before.delivered_at}`);
        const row = await store.markResent(params.id);
        if (!row) throw conflict(`message ${params.id} was delivered meanwhile`);
        if (!services.temporal) throw new ApiError('unavailable', 'Temporal is not reachable');
        await services.temporal.workflow.start('outboxDelivery', {
          taskQueue: services.taskQueue,
          workflowId: `outbox/${row.id}/resend/${Date.parse(row.resent_at ?? '') || Date.now()}`,
          args: [{ outboxId: row.id, retry: services.connector.deliveryRetry }],
        });
        return row;
      },
    }),
  ];
}
