/**
 * Encryption of what our workflows hand to Temporal (a payload codec, the SDK's place for it).
 *
 * Update arguments, activity inputs and results, queries and memos are stored in the Temporal
 * server's history and shown by its UI and CLI. Some carry secrets: a pull data address holds a
 * live transfer token, a provider's data plane issues those tokens, and protocol messages pass
 * through the outbox as activity inputs. With this codec every payload leaves the connector as
 * AES-256-GCM ciphertext, so the Temporal server, its database and its UI see event types,
 * times and ids (workflow ids, search attributes), never contents.
 *
 * The key is derived (HKDF-SHA-256) from the connector's key-encryption key (KEY_ENCRYPTION_KEY
 * or DATA_DIR/keys/kek, auth/keys.ts), so there is no second secret to keep. Each payload is
 * the whole original Payload (metadata and data, protobuf-encoded) behind a fresh 96-bit IV, with
 * the GCM tag after it; its metadata names the encoding and a short, non-secret id of the key.
 * Payloads without that encoding (histories recorded before encryption) are passed through.
 */
import { createCipheriv, createDecipheriv, createHash, hkdfSync, randomBytes } from 'node:crypto';
import type { Payload, PayloadCodec } from '@temporalio/common';
import proto from '@temporalio/proto';

const ProtoPayload = proto.temporal.api.common.v1.Payload;

export const ENCRYPTED_ENCODING = 'binary/encrypted';
/** Metadata key naming the key a payload was encrypted with. */
export const KEY_ID_METADATA = 'encryption-key-id';
const HKDF_INFO = 'building-data-connector temporal payloads v1';
const IV_BYTES = 12;
const TAG_BYTES = 16;

/** A payload that cannot be decrypted: another key, or altered. */
export class PayloadDecryptionError extends Error {
  override name = 'PayloadDecryptionError';
}

const text = (bytes: Uint8Array | null | undefined) => (bytes ? Buffer.from(bytes).toString('utf8') : '');

export function payloadEncryptionCodec(kek: Uint8Array): PayloadCodec {
  const key = Buffer.from(hkdfSync('sha256', kek, new Uint8Array(0), HKDF_INFO, 32));
  const keyId = createHash('sha256').update(key).digest('hex').slice(0, 16);
  const encodingBytes = Buffer.from(ENCRYPTED_ENCODING);
  const keyIdBytes = Buffer.from(keyId);

  const encrypt = (payload: Payload): Payload => {
    const iv = randomBytes(IV_BYTES);
    const cipher = createCipheriv('aes-256-gcm', key, iv);
    const plain = ProtoPayload.encode(payload).finish();
    return {
      metadata: { encoding: encodingBytes, [KEY_ID_METADATA]: keyIdBytes },
      data: Buffer.concat([iv, cipher.update(plain), cipher.final(), cipher.getAuthTag()]),
    };
  };

  const decrypt = (payload: Payload): Payload => {
    if (text(payload.metadata?.encoding) !== ENCRYPTED_ENCODING) return payload;
    const id = text(payload.metadata?.[KEY_ID_METADATA]);
    if (id !== keyId)
      throw new PayloadDecryptionError(
        `a Temporal payload is encrypted with key ${id || '(none named)'}, ours is ${keyId}: ` +
          'the key-encryption key (KEY_ENCRYPTION_KEY or DATA_DIR/keys/kek) is not the one the workflow started with',
      );
    const data = Buffer.from(payload.data ?? []);
    if (data.length < IV_BYTES + TAG_BYTES)
      throw new PayloadDecryptionError('a Temporal payload is truncated');
    const decipher = createDecipheriv('aes-256-gcm', key, data.subarray(0, IV_BYTES));
    decipher.setAuthTag(data.subarray(data.length - TAG_BYTES));
    let plain: Buffer;
    try {
      plain = Buffer.concat([
        decipher.update(data.subarray(IV_BYTES, data.length - TAG_BYTES)),
        decipher.final(),
      ]);
    } catch {
      throw new PayloadDecryptionError('a Temporal payload does not decrypt: it was altered');
    }
    return ProtoPayload.decode(plain);
  };

  return {
    encode: (payloads) => Promise.resolve(payloads.map(encrypt)),
    decode: (payloads) => new Promise((resolve) => resolve(payloads.map(decrypt))),
  };
}
