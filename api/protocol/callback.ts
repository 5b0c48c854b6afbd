/**
 * Whether a peer's `callbackAddress` may receive our messages (dsp-edc.md §1.7), for every
 * message that gives one (a negotiation's or transfer's opening message): on the host of the
 * caller's did:web DID (a peer can only have our messages sent to itself), and a name that
 * resolves to no loopback, private or link-local address; loopback only with the allowance that
 * lets loopback DIDs resolve (`DID_WEB_ALLOW_HTTP`).
 */
import { guardedLookup } from '../../auth/did-web-resolver.js';
import { callbackAddressProblem } from '../../domain/dsp.js';

/** Why `address` cannot be the callback of `peerDid`, or null. */
export async function callbackProblem(
  address: string,
  peerDid: string,
  allowLoopback: boolean,
): Promise<string | null> {
  const problem = callbackAddressProblem(address, peerDid, allowLoopback);
  if (problem) return problem;
  // A name must not lead to our own network either (checked again by nobody at delivery: see
  // docs/negotiation.md).
  const host = new URL(address).hostname.replace(/^\[|\]$/g, '');
  const lookup = guardedLookup({ allowHttpLoopback: allowLoopback, allowPrivateAddresses: false });
  return new Promise<string | null>((resolve) =>
    lookup(host, { all: true }, (err) =>
      resolve(err ? `the callbackAddress's host cannot be used: ${err.message}` : null),
    ),
  );
}
