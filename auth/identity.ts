/**
 * The connector's identity towards other connectors, assembled from configuration: its keys,
 * its DID and DID document, the tokens it sends, and what it needs to check tokens it receives
 * (a did:web resolver, the replay store, the authority's registry).
 */
import type { Logger } from 'pino';
import type { Config } from '../config.js';
import type { Db } from '../db/knex.js';
import { seenJtiStore } from '../db/seen-jtis.js';
import { buildDidDocument, didWebFromUrl, type DidDocument } from './did.js';
import { didWebResolver, type DidResolver } from './did-web-resolver.js';
import { loadKeyEncryptionKey, loadOrCreateConnectorKeys, signingKey, type ConnectorKey } from './keys.js';
import {
  connectorTokenIssuer,
  connectorTokenVerifier,
  type VerifyConnectorToken,
} from './connector-tokens.js';
import { authorityClient, noAuthority, type AuthorityClient } from './authority.js';

export interface ConnectorIdentity {
  /** Our participant DID (CONNECTOR_DID, or did:web derived from PUBLIC_URL). */
  did: string;
  /** Served at /.well-known/did.json (and <path>/did.json for a did:web with a path). */
  didDocument: DidDocument;
  /** A connector token for one call to the connector with DID `audienceDid` (5 minutes). */
  issueToken(audienceDid: string): Promise<string>;
}

/** What checks calls from other connectors (api/middleware/connector-auth.ts uses both). */
export interface ConnectorTrust {
  verifyConnectorToken: VerifyConnectorToken;
  authority: AuthorityClient;
  resolver: DidResolver;
}

/**
 * Our keys, made on the first start, and the key-encryption key that protects them (also the
 * root of the Temporal payload key, auth/payload-encryption.ts). The KEK's source goes to the
 * log, never the key.
 */
export async function loadIdentityKeys(
  db: Db,
  config: Config,
  logger: Logger,
): Promise<{ keys: ConnectorKey[]; kek: Uint8Array }> {
  const { kek, source, file } = loadKeyEncryptionKey({
    configured: config.identity.keyEncryptionKey,
    dataDir: config.dataDir,
  });
  if (source !== 'environment') {
    logger.info(
      { file },
      `private keys are encrypted with the key file (${source}); set KEY_ENCRYPTION_KEY in production`,
    );
  }
  return { keys: await loadOrCreateConnectorKeys(db, kek), kek };
}

/** `publicUrl` is the address we are reachable at, with the real port once listening. */
export function connectorIdentity(
  config: Config,
  publicUrl: string,
  keys: ConnectorKey[],
): ConnectorIdentity {
  const did = config.identity.did ?? didWebFromUrl(publicUrl);
  const issue = connectorTokenIssuer({ did, key: signingKey(keys) });
  return {
    did,
    didDocument: buildDidDocument(did, keys),
    issueToken: (audienceDid) => issue({ audienceDid }),
  };
}

export function connectorTrust(db: Db, config: Config, logger: Logger): ConnectorTrust {
  if (!config.authorityUrl) {
    logger.warn('AUTHORITY_URL is not set: calls from other connectors are refused (nobody is a member)');
  }
  const resolver = didWebResolver({ allowHttpLoopback: config.identity.didWebAllowHttp });
  return {
    resolver,
    verifyConnectorToken: connectorTokenVerifier({ resolver, jtis: seenJtiStore(db) }),
    authority: config.authorityUrl ? authorityClient({ url: config.authorityUrl }) : noAuthority(),
  };
}
