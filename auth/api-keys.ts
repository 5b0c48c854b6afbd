/**
 * API keys: `plk_<id>_<secret>`. The id is looked up, only a SHA-256 of the high-entropy secret
 * is stored, and the comparison is constant-time. An unknown id and a wrong secret give the
 * same answer (security.md §1.5).
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import type { ApiKeyStore, ApiKeyRecord, ApiKeyScope } from '../db/api-keys.js';
import type { Role } from './roles.js';

const KEY_PATTERN = /^plk_([a-z0-9]{12})_([0-9a-f]{48})$/;
const ID_ALPHABET = 'abcdefghijklmnopqrstuvwxyz0123456789';

const hashSecret = (secret: string): string => createHash('sha256').update(secret, 'utf8').digest('hex');

function newKeyId(): string {
  const bytes = randomBytes(12);
  return Array.from(bytes, (b) => ID_ALPHABET[b % ID_ALPHABET.length]).join('');
}

export async function createApiKey(
  store: ApiKeyStore,
  input: { name: string; role: Role; scopes?: string[]; scope?: ApiKeyScope },
): Promise<{ record: ApiKeyRecord; key: string }> {
  const id = newKeyId();
  const secret = randomBytes(24).toString('hex');
  const record = await store.insert({
    id,
    name: input.name,
    role: input.role,
    scopes: input.scopes ?? [],
    scope: input.scope ?? 'management',
    secret_hash: hashSecret(secret),
  });
  return { record, key: `plk_${id}_${secret}` };
}

// A fixed hash to compare against when the id is unknown, so both failures take the same path.
const DECOY_HASH = hashSecret('decoy');

/** The key's record when the presented key is valid and not revoked; otherwise undefined. */
export async function verifyApiKey(store: ApiKeyStore, presented: string): Promise<ApiKeyRecord | undefined> {
  const m = KEY_PATTERN.exec(presented);
  if (!m) return undefined;
  const [, id, secret] = m as unknown as [string, string, string];
  const found = await store.findForVerification(id);
  const expected = Buffer.from(found?.secret_hash ?? DECOY_HASH, 'hex');
  const actual = Buffer.from(hashSecret(secret), 'hex');
  const match = timingSafeEqual(expected, actual);
  if (!found || !match || found.revoked_at !== null) return undefined;
  const { secret_hash: _hash, ...record } = found;
  return record;
}
