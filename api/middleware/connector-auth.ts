/**
 * Authentication of calls from other connectors: a self-issued connector token
 * (`Authorization: Bearer <token>`, auth/connector-tokens.ts) from an active member of the data
 * space (auth/authority.ts). The protocol surfaces render `ProtocolAuthError` in their own shape.
 */
import type { Context, Next } from 'koa';
import { ConnectorTokenError, type VerifyConnectorToken } from '../../auth/connector-tokens.js';
import { AuthorityUnavailableError, type AuthorityClient } from '../../auth/authority.js';

/** Who is calling, once authenticated: `ctx.state.peer`. */
export interface Peer {
  did: string;
  name: string;
  roles: string[];
}

export type ProtocolAuthReason =
  | 'missing_token'
  | ConnectorTokenError['reason']
  | 'not_a_member'
  | 'inactive_member'
  | 'authority_unavailable';

/**
 * A refused caller: 401 for a missing or invalid token, 403 for a valid token of a non-member
 * or inactive member, 503 when the authority cannot say (the caller may try again).
 */
export class ProtocolAuthError extends Error {
  override name = 'ProtocolAuthError';
  constructor(
    readonly status: 401 | 403 | 503,
    readonly reason: ProtocolAuthReason,
    message: string,
  ) {
    super(message);
  }
}

export interface RequireConnectorOptions {
  ourDid: string;
  verify: VerifyConnectorToken;
  authority: AuthorityClient;
}

const BEARER = /^Bearer[ ]+([\w.-]+)[ ]*$/i;

async function verifiedDid(ctx: Context, options: RequireConnectorOptions): Promise<string> {
  const m = BEARER.exec(ctx.get('authorization'));
  if (!m)
    throw new ProtocolAuthError(
      401,
      'missing_token',
      'a connector token is required (Authorization: Bearer <token>)',
    );
  try {
    return (await options.verify(m[1]!, { ourDid: options.ourDid })).did;
  } catch (err) {
    if (err instanceof ConnectorTokenError) throw new ProtocolAuthError(401, err.reason, err.message);
    throw err;
  }
}

async function activeMember(did: string, authority: AuthorityClient) {
  let member;
  try {
    member = await authority.member(did);
  } catch (err) {
    if (err instanceof AuthorityUnavailableError)
      throw new ProtocolAuthError(503, 'authority_unavailable', err.message);
    throw err;
  }
  if (!member) throw new ProtocolAuthError(403, 'not_a_member', `${did} is not a member of the data space`);
  if (!member.active)
    throw new ProtocolAuthError(403, 'inactive_member', `${did} is not an active member of the data space`);
  return member;
}

export function requireConnector(options: RequireConnectorOptions) {
  return async function requireConnectorToken(ctx: Context, next: Next) {
    const did = await verifiedDid(ctx, options);
    const member = await activeMember(did, options.authority);
    ctx.state.peer = { did, name: member.name, roles: member.roles } satisfies Peer;
    await next();
  };
}
