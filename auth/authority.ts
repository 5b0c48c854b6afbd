/**
 * Membership, as the data-space authority's registry knows it: `GET {AUTHORITY_URL}/v1/members/{did}`
 * → `{did, name, roles, active}` or 404 (docs/authority.md). Answers are cached (a yes for 60 s,
 * a no for 10 s) so that a busy peer does not cost a look-up per request, and a member the
 * authority removes is refused within a minute. Without AUTHORITY_URL nobody is a member.
 */
import Joi from 'joi';
import { Agent, request, type Dispatcher } from 'undici';

export interface Member {
  did: string;
  name: string;
  roles: string[];
  active: boolean;
}

/** The authority could not answer (network, timeout, 5xx, a malformed answer): not cached. */
export class AuthorityUnavailableError extends Error {
  override name = 'AuthorityUnavailableError';
}

export interface AuthorityClient {
  /** The registry in use; null when none is configured. */
  readonly url: string | null;
  /** The member with this DID, or null when the authority does not know it. */
  member(did: string): Promise<Member | null>;
}

export interface AuthorityClientOptions {
  url: string;
  positiveTtlMs?: number;
  negativeTtlMs?: number;
  timeoutMs?: number;
  dispatcher?: Dispatcher;
}

const DEFAULTS = { positiveTtlMs: 60_000, negativeTtlMs: 10_000, timeoutMs: 3_000 };
const MAX_ANSWER_BYTES = 16 * 1024;
const MAX_CACHED = 10_000;

const memberSchema = Joi.object({
  did: Joi.string().required(),
  name: Joi.string().allow('').required(),
  roles: Joi.array().items(Joi.string()).required(),
  active: Joi.boolean().required(),
}).unknown(true);

async function readCapped(body: AsyncIterable<Buffer>): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    size += chunk.length;
    if (size > MAX_ANSWER_BYTES)
      throw new AuthorityUnavailableError('the authority answered more than 16 KiB');
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString('utf8');
}

function toMember(text: string, did: string): Member {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw new AuthorityUnavailableError('the authority did not answer JSON');
  }
  const { error, value } = memberSchema.validate(parsed);
  if (error) throw new AuthorityUnavailableError(`the authority's answer is not a member: ${error.message}`);
  const m = value as Member;
  if (m.did !== did) throw new AuthorityUnavailableError(`the authority answered for ${m.did}, not ${did}`);
  return { did: m.did, name: m.name, roles: m.roles, active: m.active };
}

export function authorityClient(options: AuthorityClientOptions): AuthorityClient {
  const base = options.url.replace(/\/+$/, '');
  const positiveTtlMs = options.positiveTtlMs ?? DEFAULTS.positiveTtlMs;
  const negativeTtlMs = options.negativeTtlMs ?? DEFAULTS.negativeTtlMs;
  const timeoutMs = options.timeoutMs ?? DEFAULTS.timeoutMs;
  const dispatcher =
    options.dispatcher ??
    new Agent({ connect: { timeout: timeoutMs }, headersTimeout: timeoutMs, bodyTimeout: timeoutMs });
  const cache = new Map<string, { member: Member | null; until: number }>();
  const inFlight = new Map<string, Promise<Member | null>>();

  async function lookUp(did: string): Promise<Member | null> {
    try {
      const res = await request(`${base}/v1/members/${encodeURIComponent(did)}`, {
        method: 'GET',
        headers: { accept: 'application/json' },
        dispatcher,
        signal: AbortSignal.timeout(timeoutMs),
      });
      if (res.statusCode === 404) {
        await res.body.dump().catch(() => undefined);
        return null;
      }
      if (res.statusCode !== 200) {
        await res.body.dump().catch(() => undefined);
        throw new AuthorityUnavailableError(`the authority answered ${res.statusCode}`);
      }
      return toMember(await readCapped(res.body), did);
    } catch (err) {
      if (err instanceof AuthorityUnavailableError) throw err;
      const e = err as { name?: string; code?: string; message?: string };
      const what =
        e.name === 'TimeoutError' ? `no answer within ${timeoutMs} ms` : (e.code ?? e.message ?? 'error');
      throw new AuthorityUnavailableError(`the authority at ${base} cannot be reached (${what})`);
    }
  }

  function remember(did: string, member: Member | null) {
    cache.delete(did);
    if (cache.size >= MAX_CACHED) cache.delete(cache.keys().next().value!);
    cache.set(did, { member, until: Date.now() + (member ? positiveTtlMs : negativeTtlMs) });
  }

  return {
    url: base,
    async member(did) {
      const cached = cache.get(did);
      if (cached && cached.until > Date.now()) return cached.member;
      let pending = inFlight.get(did);
      if (!pending) {
        pending = lookUp(did).finally(() => inFlight.delete(did));
        inFlight.set(did, pending);
      }
      const member = await pending;
      remember(did, member);
      return member;
    },
  };
}

/** No AUTHORITY_URL: nobody is a member, so every call from another connector is refused. */
export function noAuthority(): AuthorityClient {
  return {
    url: null,
    member: () => Promise.resolve(null),
  };
}
