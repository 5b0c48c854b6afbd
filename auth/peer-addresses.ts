/**
 * Addresses a peer gives us (a data plane endpoint, a token refresh endpoint, a callback
 * address) must not make us call into our own network (SSRF). Two checks, because Node's
 * connect skips the DNS lookup for an IP literal:
 *   - `peerAddressProblem(url)`: before the call, the scheme and an IP-literal host;
 *   - `peerDispatcher(...)`: an undici Agent whose connections resolve names through
 *     guardedLookup, so a name that leads to a private, link-local or loopback address is
 *     refused when the connection is made (also after a DNS change).
 * Loopback (and plain http to it) is allowed only with DID_WEB_ALLOW_HTTP, for connectors side by
 * side on one machine, as for did:web resolution.
 */
import net from 'node:net';
import { Agent } from 'undici';
import { guardedLookup, isNonPublicAddress } from './did-web-resolver.js';
import { isLoopbackHost } from './did.js';

/** Why we may not call `address` that a peer gave us, or null. */
export function peerAddressProblem(address: string, allowLoopback: boolean): string | null {
  let url: URL;
  try {
    url = new URL(address);
  } catch {
    return 'it is not a URL';
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') return 'it is not an http(s) URL';
  if (url.username || url.password) return 'it carries credentials';
  const host = url.hostname.replace(/^\[|\]$/g, '');
  if (isLoopbackHost(host)) return allowLoopback ? null : 'it is a loopback address';
  if (net.isIP(host) && isNonPublicAddress(host)) return `${host} is not a public address`;
  if (url.protocol !== 'https:') return 'it is not an https URL';
  return null;
}

/** An Agent for peer-given addresses: names resolving to non-public addresses are refused at connect. */
export function peerDispatcher(allowLoopback: boolean, options: Agent.Options = {}): Agent {
  return new Agent({
    ...options,
    connect: {
      ...(typeof options.connect === 'object' ? options.connect : {}),
      lookup: guardedLookup({ allowHttpLoopback: allowLoopback, allowPrivateAddresses: false }),
    },
  });
}
