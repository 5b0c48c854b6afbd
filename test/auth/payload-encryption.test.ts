/**
 * The Temporal payload codec (auth/payload-encryption.ts): what it hands to Temporal reveals
 * nothing, decrypts back to the same payload, and refuses another key or an altered byte.
 */
import { expect } from 'chai';
import { randomBytes } from 'node:crypto';
import { defaultPayloadConverter, type Payload } from '@temporalio/common';
import {
  ENCRYPTED_ENCODING,
  KEY_ID_METADATA,
  PayloadDecryptionError,
  payloadEncryptionCodec,
} from '../../auth/payload-encryption.js';

const text = (b: Uint8Array | null | undefined) => Buffer.from(b ?? []).toString('utf8');

describe('Temporal payload encryption', () => {
  const kek = randomBytes(32);
  const codec = payloadEncryptionCodec(kek);
  const secret = 'dpt_live-transfer-token-0123456789';
  const payload = defaultPayloadConverter.toPayload({ endpoint: 'https://p.example/dataplane/v1', secret });

  it('hands Temporal ciphertext only, with the encoding and a key id, and decrypts back', async () => {
    const [encrypted] = await codec.encode([payload]);
    expect(text(encrypted!.metadata!.encoding)).to.equal(ENCRYPTED_ENCODING);
    expect(text(encrypted!.metadata![KEY_ID_METADATA])).to.match(/^[0-9a-f]{16}$/);
    expect(Object.keys(encrypted!.metadata!)).to.have.members(['encoding', KEY_ID_METADATA]);
    expect(Buffer.from(encrypted!.data!).includes(secret)).to.equal(false);
    expect(Buffer.from(encrypted!.data!).includes('json/plain')).to.equal(false);
    const [decrypted] = await codec.decode([encrypted!]);
    expect(defaultPayloadConverter.fromPayload(decrypted!)).to.deep.equal({
      endpoint: 'https://p.example/dataplane/v1',
      secret,
    });
    expect(text(decrypted!.metadata!.encoding)).to.equal('json/plain');
  });

  it('uses a fresh IV for every payload', async () => {
    const [a, b] = await codec.encode([payload, payload]);
    expect(Buffer.from(a!.data!).equals(Buffer.from(b!.data!))).to.equal(false);
  });

  it('passes payloads that were never encrypted through (histories recorded before)', async () => {
    const [same] = await codec.decode([payload]);
    expect(same).to.equal(payload);
  });

  it('refuses a payload encrypted with another key, naming both key ids', async () => {
    const [foreign] = await payloadEncryptionCodec(randomBytes(32)).encode([payload]);
    const error = await codec.decode([foreign!]).then(
      () => null,
      (err: unknown) => err,
    );
    expect(error).to.be.instanceOf(PayloadDecryptionError);
    expect((error as Error).message).to.include(text(foreign!.metadata![KEY_ID_METADATA]));
    expect((error as Error).message).to.include('KEY_ENCRYPTION_KEY');
  });

  it('refuses an altered or truncated payload', async () => {
    const [encrypted] = await codec.encode([payload]);
    const data = Buffer.from(encrypted!.data!);
    for (const at of [0, 12, data.length - 20, data.length - 1]) {
      const altered = Buffer.from(data);
      altered[at]! ^= 1;
      const bad: Payload = { metadata: encrypted!.metadata!, data: altered };
      const error = await codec.decode([bad]).then(
        () => null,
        (err: unknown) => err,
      );
      expect(error, `byte ${at}`).to.be.instanceOf(PayloadDecryptionError);
      expect((error as Error).message).to.include('altered');
    }
    const short: Payload = { metadata: encrypted!.metadata!, data: data.subarray(0, 20) };
    const error = await codec.decode([short]).then(
      () => null,
      (err: unknown) => err,
    );
    expect((error as Error).message).to.include('truncated');
  });
});
