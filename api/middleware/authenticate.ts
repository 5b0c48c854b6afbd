import type { Context, Next } from 'koa';
import { verifyApiKey } from '../../auth/api-keys.js';
import type { ApiKeyScope, ApiKeyStore } from '../../db/api-keys.js';
import { ApiError } from '../../domain/errors.js';

export interface Caller {
  kind: 'api_key';
  id: string;
  name: string;
  role: string;
  scopes: string[];
  scope: ApiKeyScope;
}

/**
 * Reads the credential (API key in `Authorization: Bearer …` or `Authorization: ApiKey …`;
 * never from the query string). A credential that is present but not valid is refused here,
 * whatever the route; a missing one is refused by routes that need a role. A valid key of
 * another scope than the surface's (a gateway key on /api/v1, a management key on /gateway)
 * is forbidden.
 */
export function authenticate(keys: ApiKeyStore, scope: ApiKeyScope = 'management') {
  return async function authenticateCaller(ctx: Context, next: Next) {
    const header = ctx.get('authorization');
    if (header) {
      const m = /^(Bearer|ApiKey)\s+(\S+)\s*$/i.exec(header);
      const record = m ? await verifyApiKey(keys, m[2]!) : undefined;
      if (!record) throw new ApiError('unauthenticated', 'the API key is not valid');
      if (record.scope !== scope) {
        throw new ApiError(
          'forbidden',
          `this is a ${record.scope} key; it cannot be used here (${scope} keys only)`,
        );
      }
      ctx.state.caller = {
        kind: 'api_key',
        id: record.id,
        name: record.name,
        role: record.role,
        scopes: record.scopes,
        scope: record.scope,
      } satisfies Caller;
      void keys.touch(record.id).catch(() => undefined);
    }
    await next();
  };
}
