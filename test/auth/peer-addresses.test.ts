/**
 * Addresses a peer gives us (data plane endpoint, refresh endpoint, callback address) never lead
 * into our own network: IP literals are checked before the call, names when the socket connects.
 */
import { expect } from 'chai';
import http from 'node:http';
import { request } from 'undici';
import { peerAddressProblem, peerDispatcher } from '../../auth/peer-addresses.js';
import { refreshTransferToken, TokenRefreshError, type DataAddress } from '../../gateway/dataplane/access.js';

describe('peer-given addresses (SSRF guard)', () => {
  it('refuses private, link-local, loopback and unspecified IP literals, credentials and other schemes', () => {
    for (const address of [
      'http://169.254.169.254/latest/meta-data',
      'https://10.0.0.1/dataplane/v1',
      'https://192.168.1.20/x',
      'https://172.16.0.1/x',
      'https://100.64.0.1/x',
      'https://0.0.0.0/x',
      'https://[::1]/x',
      'https://[fe80::1]/x',
      'https://[fc00::1]/x',
      'https://user:pw@provider.example/x',
      'ftp://provider.example/x',
      'not a url',
    ])
      expect(peerAddressProblem(address, false), address).to.be.a('string');
  });

  it('wants https for public hosts, and allows loopback (http too) only with the allowance', () => {
    expect(peerAddressProblem('https://provider.example/dataplane/v1', false)).to.equal(null);
    expect(peerAddressProblem('https://203.0.113.9/dataplane/v1', false)).to.equal(null);
    expect(peerAddressProblem('http://provider.example/dataplane/v1', false)).to.equal(
      'it is not an https URL',
    );
    expect(peerAddressProblem('http://127.0.0.1:8080/dataplane/v1', false)).to.equal(
      'it is a loopback address',
    );
    expect(peerAddressProblem('http://localhost:8080/dataplane/v1', false)).to.equal(
      'it is a loopback address',
    );
    expect(peerAddressProblem('http://127.0.0.1:8080/dataplane/v1', true)).to.equal(null);
    expect(peerAddressProblem('http://localhost:8080/dataplane/v1', true)).to.equal(null);
    // The allowance opens loopback only, not the rest of our network.
    expect(peerAddressProblem('http://10.0.0.1/x', true)).to.be.a('string');
  });

  it('refuses at connect a name that resolves to loopback, unless allowed', async () => {
    const server = http.createServer((_req, res) => res.end('ok'));
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
    const url = `http://localhost:${(server.address() as { port: number }).port}/`;
    try {
      const refused = await request(url, { dispatcher: peerDispatcher(false) }).then(
        () => null,
        (err: Error & { code?: string }) => err,
      );
      expect(refused?.code).to.equal('EDIDADDRESS');
      const allowed = await request(url, { dispatcher: peerDispatcher(true) });
      expect(await allowed.body.text()).to.equal('ok');
    } finally {
      await new Promise((r) => server.close(r));
    }
  });

  it('does not renew a token at a refresh endpoint inside our network (a final refusal, no call)', async () => {
    const address: DataAddress = {
      '@type': 'DataAddress',
      endpointType: 'https://w3id.org/idsa/v4.1/HTTP',
      endpoint: 'https://provider.example/dataplane/v1',
      endpointProperties: [
        { '@type': 'EndpointProperty', name: 'authorization', value: 'dpt_x' },
        { '@type': 'EndpointProperty', name: 'authType', value: 'bearer' },
        { '@type': 'EndpointProperty', name: 'expiresAt', value: '2026-11-22T20:00:00.000Z' },
        { '@type': 'EndpointProperty', name: 'refreshEndpoint', value: 'http://169.254.169.254/token' },
      ],
    };
    const err = await refreshTransferToken(address).then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).to.be.instanceOf(TokenRefreshError);
    expect(err).to.include({ retryable: false });
    expect((err as Error).message).to.include('169.254.169.254 is not a public address');
  });
});
