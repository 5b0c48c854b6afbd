/**
 * The DSP TCK profile (docs/decisions/0005-tck-profile.md): everything the TCK needs from a
 * connector under test that is not the protocol itself. It exists only in the process that
 * tck/run.ts starts, which hands its surface to `startConnector`; the connector has no switch
 * that turns it on, so it cannot change how a deployed connector behaves.
 *
 * - authentication: the TCK's fixed Authorization value is the TCK participant (auth.ts);
 * - the two initiate webhooks (webhooks.ts);
 * - seed data: datasets, offers and finalized agreements (seed.ts);
 * - the scripted decisions per dataset (scripts.ts), taken through the management API.
 */
import type { Logger } from 'pino';
import type { SurfaceProfile } from '../../api/app.js';
import type { Db } from '../../db/knex.js';
import { tckPeerAuthentication } from './auth.js';
import { operatorClient, type Operator } from './operator.js';
import { seedAgreements, seedDatasets } from './seed.js';
import { startDirector, type Director } from './scripts.js';
import { tckWebhooks } from './webhooks.js';

/** How the TCK names itself (its DspConstants). */
export const TCK_PARTICIPANT_ID = 'TCK_PARTICIPANT';
/**
 * The DID our connector knows the TCK participant by (peers are DIDs here): a loopback did:web
 * on the TCK's own host and port, so that the callback address it gives is on its host, as a
 * real peer's must be.
 */
export const tckParticipantDid = (callbackAddress: string) => {
  const url = new URL(callbackAddress);
  return `did:web:${url.hostname}${url.port ? `%3A${url.port}` : ''}`;
};

export interface TckProfileOptions {
  /** The exact Authorization value the TCK sends (tck/run.ts makes a random one per run). */
  authorization: string;
  /** Where the TCK listens (its callback address). */
  tckAddress: string;
  logger: Logger;
}

export interface TckProfile {
  surface: SurfaceProfile;
  /** Once the connector runs: an operator key, the seed data, the director. */
  attach(connector: {
    url: string;
    adminKey: string;
    db: Db;
    did: string;
    backend: { url: string; key: string };
  }): Promise<void>;
  /** What the director could not do (explains failing scenarios). */
  problems(): string[];
  stop(): Promise<void>;
}

export function createTckProfile(options: TckProfileOptions): TckProfile {
  const participant = { id: TCK_PARTICIPANT_ID, did: tckParticipantDid(options.tckAddress) };
  let operator: Operator | null = null;
  let director: Director | null = null;
  return {
    surface: {
      wrapPeerAuthentication: tckPeerAuthentication(options.authorization, {
        did: participant.did,
        name: participant.id,
        roles: [],
      }),
      router: tckWebhooks({
        authorization: options.authorization,
        participant: { ...participant, address: options.tckAddress },
        operator: () => operator,
      }),
    },
    async attach(connector) {
      const admin = operatorClient(connector.url, connector.adminKey);
      const created = await admin.expect(
        'POST',
        '/api/v1/api-keys',
        { name: 'DSP TCK profile', role: 'operator' },
        [201],
      );
      const op = operatorClient(connector.url, String(created.body.key));
      await seedDatasets(op, connector.backend);
      await seedAgreements(
        connector.db,
        { did: connector.did },
        { ...participant, address: options.tckAddress },
      );
      operator = op;
      director = startDirector(connector.db, op, options.logger);
    },
    problems: () => director?.problems ?? [],
    async stop() {
      await director?.stop();
    },
  };
}
