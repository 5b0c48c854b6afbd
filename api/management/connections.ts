/**
 * Connections (consumer side): named subscriptions that the gateway serves at
 * `/gateway/{alias}/v1`. List, read and delete them (deleting ends the running transfer), and
 * say which applications (gateway API keys) may use each one, read-only or read-write.
 */
import Joi from 'joi';
import { route } from '../routes.js';
import type { Services } from '../services.js';
import { pageOf, pageQuery, toPageRequest } from './schemas.js';
import { dateTime } from '../validation.js';
import { ApiError, invalidRequest, notFound } from '../../domain/errors.js';
import { isTransferEnded, type TransferState } from '../../domain/transfer.js';
import { connectionStore, type AppAccess } from '../../db/connections.js';
import { apiKeyStore } from '../../db/api-keys.js';
import { CONNECTION_ALIAS, actOnTransfer } from './transfers.js';

const appOutput = Joi.object({
  api_key_id: Joi.string().required(),
  access: Joi.string().valid('read', 'read_write').required(),
  created_at: dateTime().required(),
  updated_at: dateTime().required(),
});

const connectionOutput = Joi.object({
  alias: Joi.string().required(),
  negotiation_id: Joi.string().allow(null).required(),
  agreement_id: Joi.string().allow(null).required(),
  transfer_id: Joi.string().allow(null).required(),
  transfer_state: Joi.string().allow(null).required(),
  provider_did: Joi.string().allow(null).required(),
  apps: Joi.array().items(appOutput).required(),
  created_at: dateTime().required(),
  updated_at: dateTime().required(),
});

const aliasParams = Joi.object({
  alias: Joi.string().pattern(CONNECTION_ALIAS).required().messages({
    'string.pattern.base': 'is not a connection alias (lower-case letters, digits and dashes)',
  }),
});
const appParams = aliasParams.keys({ api_key_id: Joi.string().min(1).max(256).required() });

export function connectionRoutes(services: Services) {
  const store = connectionStore(services.db);

  async function existing(alias: string) {
    const connection = await store.get(alias);
    if (!connection) throw notFound('connection', alias);
    return connection;
  }

  return [
    route<never, { cursor?: string; limit: number }>({
      method: 'get',
      path: '/connections',
      summary: 'List connections with their transfer and the applications allowed on them',
      tag: 'connections',
      role: 'viewer',
      query: pageQuery,
      response: pageOf(connectionOutput),
      handler: ({ query }) => store.list(toPageRequest(query)),
    }),
    route<{ alias: string }>({
      method: 'get',
      path: '/connections/:alias',
      summary: 'Read a connection',
      tag: 'connections',
      role: 'viewer',
      params: aliasParams,
      response: connectionOutput,
      handler: ({ params }) => existing(params.alias),
    }),
    route<{ alias: string }>({
      method: 'delete',
      path: '/connections/:alias',
      summary: 'Delete a connection; its running transfer is terminated',
      tag: 'connections',
      role: 'operator',
      params: aliasParams,
      response: connectionOutput,
      async handler({ params, caller }) {
        const connection = await existing(params.alias);
        const state = connection.transfer_state as TransferState | null;
        if (connection.transfer_id && state && !isTransferEnded(state)) {
          try {
            await actOnTransfer(
              services,
              connection.transfer_id,
              'terminate',
              caller,
              'the connection was deleted',
            );
          } catch (err) {
            // Ended meanwhile: nothing left to terminate.
            if (!(err instanceof ApiError && err.code === 'conflict')) throw err;
          }
        }
        const last = (await store.get(params.alias)) ?? connection;
        await store.remove(params.alias);
        return last;
      },
    }),
    route<{ alias: string; api_key_id: string }, never, { access: AppAccess }>({
      method: 'put',
      path: '/connections/:alias/apps/:api_key_id',
      summary: 'Allow an application (gateway API key) on a connection, read-only or read-write',
      tag: 'connections',
      role: 'operator',
      params: appParams,
      body: Joi.object({ access: Joi.string().valid('read', 'read_write').required() }),
      response: connectionOutput,
      async handler({ params, body }) {
        await existing(params.alias);
        const key = await apiKeyStore(services.db).get(params.api_key_id);
        if (!key || key.revoked_at) throw notFound('API key', params.api_key_id);
        if (key.scope !== 'gateway')
          throw invalidRequest(
            `key ${key.id} has scope ${key.scope}; applications use gateway keys`,
            'api_key_id',
          );
        await store.setApp(params.alias, params.api_key_id, body.access);
        return existing(params.alias);
      },
    }),
    route<{ alias: string; api_key_id: string }>({
      method: 'delete',
      path: '/connections/:alias/apps/:api_key_id',
      summary: 'Stop an application from using a connection',
      tag: 'connections',
      role: 'operator',
      params: appParams,
      response: connectionOutput,
      async handler({ params }) {
        await existing(params.alias);
        if (!(await store.removeApp(params.alias, params.api_key_id)))
          throw notFound('application on this connection', params.api_key_id);
        return existing(params.alias);
      },
    }),
  ];
}
