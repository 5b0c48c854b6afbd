/**
 * The connector's signing keys. Made on the first start (ES256) and kept in PostgreSQL; the
 * private half only encrypted, as a compact JWE (`dir`, A256GCM) under a key-encryption key
 * (KEK) that never enters the database: KEY_ENCRYPTION_KEY, or else the key file
 * `DATA_DIR/keys/kek` (created on the first start, mode 0600). Losing the KEK loses the keys,
 * and with them the DID document peers know: back it up with the database.
 */
import fs from 'node:fs';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import {
  CompactEncrypt,
  base64url,
  calculateJwkThumbprint,
  compactDecrypt,
  exportJWK,
  generateKeyPair,
  importJWK,
  type CryptoKey,
  type JWK,
} from 'jose';
import type { Db } from '../db/knex.js';
import { connectorKeyStore, type ConnectorKeyRow } from '../db/connector-keys.js';

export const SIGNING_ALG = 'ES256';
const KEK_BYTES = 32;

/** A key of ours, ready to sign; `kid` is the fragment of its verification method in our DID document. */
export interface ConnectorKey {
  kid: string;
  alg: string;
  publicJwk: JWK;
  privateKey: CryptoKey;
  createdAt: Date;
}

export class KeyEncryptionError extends Error {
  override name = 'KeyEncryptionError';
}

/** Where the KEK came from, for the start-up log line (never the key itself). */
export type KekSource = 'environment' | 'created key file' | 'key file';

/**
 * The key-encryption key: from KEY_ENCRYPTION_KEY when set (production: keep it in a secret
 * store), else from `<dataDir>/keys/kek`, created here on the first start.
 */
export function loadKeyEncryptionKey(options: { configured: string | null; dataDir: string }): {
  kek: Uint8Array;
  source: KekSource;
  file?: string;
} {
  if (options.configured)
    return { kek: decodeKek(options.configured, 'KEY_ENCRYPTION_KEY'), source: 'environment' };
  const file = path.join(options.dataDir, 'keys', 'kek');
  fs.mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
  const created = createKeyFileOnce(file);
  return {
    kek: decodeKek(fs.readFileSync(file, 'utf8'), file),
    source: created ? 'created key file' : 'key file',
    file,
  };
}

/**
 * Writes a new KEK to `file` unless it exists. The key is written to a private temporary file
 * first and then linked into place, which fails if `file` exists: a process starting at the
 * same moment never reads a half-written key, and never replaces the other's.
 */
function createKeyFileOnce(file: string): boolean {
  if (fs.existsSync(file)) return false;
  const temporary = `${file}.${process.pid}.${randomBytes(4).toString('hex')}`;
  fs.writeFileSync(temporary, `${randomBytes(KEK_BYTES).toString('base64')}\n`, { flag: 'wx', mode: 0o600 });
  try {
    fs.linkSync(temporary, file);
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw err;
  } finally {
    fs.rmSync(temporary, { force: true });
  }
}

function decodeKek(text: string, where: string): Uint8Array {
  const bytes = Buffer.from(text.trim(), 'base64');
  if (bytes.length !== KEK_BYTES)
    throw new KeyEncryptionError(`${where}: the key-encryption key must be 32 bytes in base64`);
  return new Uint8Array(bytes);
}

/** A short, non-secret name of the KEK, kept in the JWE header so a wrong KEK is named as such. */
async function kekId(kek: Uint8Array): Promise<string> {
  return (await calculateJwkThumbprint({ kty: 'oct', k: base64url.encode(kek) })).slice(0, 16);
}

async function encryptPrivateJwk(jwk: JWK, kid: string, kek: Uint8Array): Promise<string> {
  // The kid is in the protected header, which GCM authenticates: a ciphertext moved to another row fails.
  return new CompactEncrypt(new TextEncoder().encode(JSON.stringify(jwk)))
    .setProtectedHeader({ alg: 'dir', enc: 'A256GCM', kid, kek: await kekId(kek) })
    .encrypt(kek);
}

async function decryptPrivateKey(row: ConnectorKeyRow, kek: Uint8Array): Promise<CryptoKey> {
  let plaintext: Uint8Array;
  let header: { kid?: string };
  try {
    ({ plaintext, protectedHeader: header } = await compactDecrypt(row.private_key_encrypted, kek, {
      keyManagementAlgorithms: ['dir'],
      contentEncryptionAlgorithms: ['A256GCM'],
    }));
  } catch (err) {
    throw new KeyEncryptionError(
      `the private key ${row.kid} cannot be decrypted: the key-encryption key (KEY_ENCRYPTION_KEY or DATA_DIR/keys/kek) is not the one it was stored with`,
      { cause: err },
    );
  }
  if (header.kid !== row.kid)
    throw new KeyEncryptionError(`the stored private key of ${row.kid} belongs to another key`);
  return (await importJWK(JSON.parse(new TextDecoder().decode(plaintext)) as JWK, row.alg)) as CryptoKey;
}

async function newKeyRow(kek: Uint8Array): Promise<Omit<ConnectorKeyRow, 'created_at' | 'active'>> {
  const { publicKey, privateKey } = await generateKeyPair(SIGNING_ALG, { extractable: true });
  const publicJwk = await exportJWK(publicKey);
  const kid = await calculateJwkThumbprint(publicJwk);
  return {
    kid,
    alg: SIGNING_ALG,
    public_jwk: { ...publicJwk, kid, alg: SIGNING_ALG, use: 'sig' },
    private_key_encrypted: await encryptPrivateJwk(await exportJWK(privateKey), kid, kek),
  };
}

/**
 * Our active keys, the newest last; the first start makes one. A transaction-scoped advisory lock
 * makes that happen once even when an API and a worker process start together on a fresh database.
 */
export async function loadOrCreateConnectorKeys(db: Db, kek: Uint8Array): Promise<ConnectorKey[]> {
  const rows = await db.transaction(async (trx) => {
    await trx.raw(`select pg_advisory_xact_lock(hashtext('connector_keys'))`);
    const store = connectorKeyStore(trx);
    const existing = await store.active();
    if (existing.length > 0) return existing;
    await store.insert(await newKeyRow(kek));
    return store.active();
  });
  return Promise.all(
    rows.map(async (row) => ({
      kid: row.kid,
      alg: row.alg,
      publicJwk: row.public_jwk,
      privateKey: await decryptPrivateKey(row, kek),
      createdAt: row.created_at,
    })),
  );
}

/** The key new tokens are signed with: the newest active one. */
export function signingKey(keys: ConnectorKey[]): ConnectorKey {
  const key = keys.at(-1);
  if (!key) throw new Error('the connector has no active signing key');
  return key;
}
