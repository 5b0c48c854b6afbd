/**
 * Transfer access tokens of the provider data plane (gateway/dataplane/access.ts) on real
 * PostgreSQL: issue, verify, revoke, renew, and a renewal answer that gets lost.
 */
import { expect } from 'chai';
import { createDb, migrateLatest, type Db } from '../../db/knex.js';
import {
  endpointProperty,
  hashToken,
  isPullDataAddress,
  issueTransferAccess,
  maskDataAddress,
  renewTransferAccess,
  revokeTransferAccess,
  verifyTransferToken,
  type DataAddress,
} from '../../gateway/dataplane/access.js';
import { createTestDatabase } from '../support/stack.js';
import { MASK } from '../../domain/masking.js';

const ENDPOINT = 'http://127.0.0.1:9/dataplane/v1';
const token = (a: DataAddress) => endpointProperty(a, 'authorization')!;

describe('data plane access tokens', function () {
  let db: Db;
  before(async () => {
    db = createDb(await createTestDatabase('access'));
    await migrateLatest(db);
  });
  after(() => db?.destroy());

  const issue = (transferId: string, issueKey = `${transferId}:start`, ttlSeconds?: number) =>
    issueTransferAccess(db, {
      transferId,
      agreementId: `agreement-${transferId}`,
      consumerDid: 'did:web:consumer',
      endpoint: `${ENDPOINT}/`,
      issueKey,
      ...(ttlSeconds ? { ttlSeconds } : {}),
    });

  it('issues a bearer data address bound to the transfer, storing only a hash', async () => {
    const address = await issue('t1');
    expect(isPullDataAddress(address)).to.equal(true);
    expect(address).to.deep.include({ '@type': 'DataAddress', endpoint: ENDPOINT });
    expect(token(address)).to.match(/^dpt_[A-Za-z0-9_-]{43}$/);
    expect(endpointProperty(address, 'authType')).to.equal('bearer');
    expect(endpointProperty(address, 'refreshEndpoint')).to.equal(`${ENDPOINT}/token`);
    const expires = Date.parse(endpointProperty(address, 'expiresAt')!);
    expect(expires - Date.now()).to.be.within(500_000, 610_000);

    const rows = await db('dataplane_tokens').where({ transfer_id: 't1' });
    expect(rows).to.have.length(1);
    expect(rows[0].token_hash).to.equal(hashToken(token(address)));
    expect(JSON.stringify(rows)).not.to.include(token(address));

    const grant = await verifyTransferToken(db, token(address));
    expect(grant).to.include({
      transferId: 't1',
      agreementId: 'agreement-t1',
      consumerDid: 'did:web:consumer',
    });
  });

  it('masks the token for management reads and leaves the rest', async () => {
    const address = await issue('t-mask');
    const masked = maskDataAddress(address)!;
    expect(endpointProperty(masked, 'authorization')).to.equal(MASK);
    expect(endpointProperty(masked, 'expiresAt')).to.equal(endpointProperty(address, 'expiresAt'));
    expect(maskDataAddress(null)).to.equal(null);
    expect(token(address)).not.to.equal(MASK);
  });

  it('refuses malformed, unknown, revoked and expired tokens alike', async () => {
    expect(await verifyTransferToken(db, 'nonsense')).to.equal(undefined);
    expect(await verifyTransferToken(db, `dpt_${'A'.repeat(43)}`)).to.equal(undefined);

    const address = await issue('t-revoke');
    await revokeTransferAccess(db, 't-revoke');
    await revokeTransferAccess(db, 't-revoke');
    expect(await verifyTransferToken(db, token(address))).to.equal(undefined);
    expect(await renewTransferAccess(db, token(address))).to.equal(undefined);

    const expiring = await issue('t-expired');
    await db('dataplane_tokens')
      .where({ transfer_id: 't-expired' })
      .update({ expires_at: db.raw("now() - interval '1 second'") });
    expect(await verifyTransferToken(db, token(expiring))).to.equal(undefined);
    expect(await renewTransferAccess(db, token(expiring))).to.equal(undefined);
  });

  it('a retried issue (same issue key) replaces its token; a new issue revokes all older ones', async () => {
    const first = await issue('t2', 't2:start');
    const retried = await issue('t2', 't2:start');
    expect(token(retried)).not.to.equal(token(first));
    expect(await verifyTransferToken(db, token(first))).to.equal(undefined);
    expect(await verifyTransferToken(db, token(retried))).to.not.equal(undefined);
    expect(await db('dataplane_tokens').where({ transfer_id: 't2' })).to.have.length(1);

    // Resume after a suspension: a fresh token under a new issue key; the old one stops working.
    const resumed = await issue('t2', 't2:resume-1');
    expect(await verifyTransferToken(db, token(retried))).to.equal(undefined);
    expect(await verifyTransferToken(db, token(resumed))).to.not.equal(undefined);
    // Other transfers are untouched.
    expect(await verifyTransferToken(db, token(await issue('t3')))).to.not.equal(undefined);
  });

  it('renews with the same lifetime; the old token works until the new one is used', async () => {
    const original = await issue('t4', 't4:start', 120);
    const renewed = (await renewTransferAccess(db, token(original)))!;
    expect(renewed.grant).to.include({ transferId: 't4', agreementId: 'agreement-t4' });
    expect(token(renewed.address)).not.to.equal(token(original));
    const lifetime = Date.parse(endpointProperty(renewed.address, 'expiresAt')!) - Date.now();
    expect(lifetime).to.be.within(100_000, 121_000);

    // Until the new token is used, both work.
    expect(await verifyTransferToken(db, token(original))).to.not.equal(undefined);
    expect(await verifyTransferToken(db, token(renewed.address))).to.not.equal(undefined);
    // Its first use retired the old one.
    expect(await verifyTransferToken(db, token(original))).to.equal(undefined);
    expect(await verifyTransferToken(db, token(renewed.address))).to.not.equal(undefined);
  });

  it('a renewal answer lost on the way: asking again with the old token works, the lost token does not', async () => {
    const original = await issue('t5');
    const lost = (await renewTransferAccess(db, token(original)))!;
    // The consumer never saw `lost` and asks again with the token it still holds.
    const again = (await renewTransferAccess(db, token(original)))!;
    expect(token(again.address)).not.to.equal(token(lost.address));
    expect(await verifyTransferToken(db, token(lost.address))).to.equal(undefined);
    expect(await verifyTransferToken(db, token(original))).to.not.equal(undefined);
    expect(await verifyTransferToken(db, token(again.address))).to.not.equal(undefined);
    expect(await verifyTransferToken(db, token(original))).to.equal(undefined);

    // Renewing with the current token retires nothing it still needs, and chains on.
    const next = (await renewTransferAccess(db, token(again.address)))!;
    expect(await verifyTransferToken(db, token(again.address))).to.not.equal(undefined);
    expect(await verifyTransferToken(db, token(next.address))).to.not.equal(undefined);
    expect(await verifyTransferToken(db, token(again.address))).to.equal(undefined);
  });

  it('revoking a transfer ends renewed tokens too', async () => {
    const original = await issue('t6');
    const renewed = (await renewTransferAccess(db, token(original)))!;
    await revokeTransferAccess(db, 't6');
    expect(await verifyTransferToken(db, token(original))).to.equal(undefined);
    expect(await verifyTransferToken(db, token(renewed.address))).to.equal(undefined);
    expect(await renewTransferAccess(db, token(renewed.address))).to.equal(undefined);
  });

  it('concurrent renewals with one token leave exactly one usable successor', async () => {
    const original = await issue('t7');
    const results = await Promise.all([1, 2, 3, 4].map(() => renewTransferAccess(db, token(original))));
    const usable = [];
    for (const r of results) if (await verifyTransferToken(db, token(r!.address))) usable.push(r);
    expect(usable).to.have.length(1);
  });
});
