/**
 * API keys (admin only). The secret is shown once, at creation. A key's scope says which
 * surface it opens: `management` (/api/v1, by role) or `gateway` (applications reading
 * buildings through /gateway; their connections say which ones). Neither opens the other.
 */
import Joi from 'joi';
import { route } from '../routes.js';
import type { Services } from '../services.js';
import { idParams, pageOf, pageQuery, toPageRequest } from './schemas.js';
import { dateTime } from '../validation.js';
import { notFound } from '../../domain/errors.js';
import { ROLES, type Role } from '../../auth/roles.js';
import { createApiKey } from '../../auth/api-keys.js';
import { API_KEY_SCOPES, apiKeyStore, type ApiKeyScope } from '../../db/api-keys.js';

const keyOutput = Joi.object({
  id: Joi.string().required(),
  name: Joi.string().required(),
  role: Joi.string()
    .valid(...ROLES)
    .required(),
  scopes: Joi.array().items(Joi.string()),
  scope: Joi.string()
    .valid(...API_KEY_SCOPES)
    .required(),
  created_at: dateTime(),
  last_used_at: dateTime().allow(null),
  revoked_at: dateTime().allow(null),
});

export function apiKeyRoutes(services: Services) {
  const keys = apiKeyStore(services.db);
  return [
    route<never, never, { name: string; role?: Role; scope: ApiKeyScope }>({
      method: 'post',
      path: '/api-keys',
      summary: 'Create an API key; the key itself is in this answer only',
      tag: 'api-keys',
      role: 'admin',
      body: Joi.object({
        name: Joi.string().trim().min(1).max(200).required(),
        scope: Joi.string()
          .valid(...API_KEY_SCOPES)
          .default('management')
          .description('management (the default) or gateway (an application key)'),
        // A gateway key has no management role; it is stored as viewer and opens nothing here.
        role: Joi.string()
          .valid(...ROLES)
          .when('scope', { is: 'gateway', then: Joi.optional(), otherwise: Joi.required() }),
      }),
      response: keyOutput.keys({ key: Joi.string().required() }),
      status: 201,
      async handler({ body }) {
        const { record, key } = await createApiKey(keys, {
          name: body.name,
          role: body.role ?? 'viewer',
          scope: body.scope,
        });
        return { ...record, key };
      },
    }),
    route<never, { cursor?: string; limit: number }>({
      method: 'get',
      path: '/api-keys',
      summary: 'List API keys (never their secrets)',
      tag: 'api-keys',
      role: 'admin',
      query: pageQuery,
      response: pageOf(keyOutput),
      handler: ({ query }) => keys.list(toPageRequest(query)),
    }),
    route<{ id: string }>({
      method: 'delete',
      path: '/api-keys/:id',
      summary: 'Revoke an API key (it stops working at once; revoking twice is harmless)',
      tag: 'api-keys',
      role: 'admin',
      params: idParams,
      response: keyOutput,
      async handler({ params }) {
        const record = await keys.revoke(params.id);
        if (!record) throw notFound('API key', params.id);
        return record;
      },
    }),
  ];
}
