/**
 * The TCK's identity. The TCK cannot hold a connector token: it sends one fixed, configured
 * `Authorization` value on every call. In the profile, exactly that value authenticates the
 * caller as the TCK participant; every other caller goes through the standard authentication
 * unchanged, so nothing a real peer goes through is loosened.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type Koa from 'koa';
import type { Peer } from '../../api/middleware/connector-auth.js';

const digest = (value: string) => createHash('sha256').update(value).digest();

/** Compares in constant time (over digests, so lengths do not leak either). */
export function sameSecret(given: string, expected: string): boolean {
  return timingSafeEqual(digest(given), digest(expected));
}

export function tckPeerAuthentication(authorization: string, participant: Peer) {
  if (authorization.length < 16)
    throw new Error('the TCK authorization value must be at least 16 characters');
  return (standard: Koa.Middleware): Koa.Middleware =>
    async function authenticateTckOrPeer(ctx, next) {
      if (sameSecret(ctx.get('authorization'), authorization)) {
        ctx.state.peer = { ...participant } satisfies Peer;
        return next();
      }
      return standard(ctx, next);
    };
}
