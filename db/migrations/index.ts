import type { Knex } from 'knex';
import * as foundation from './0001_foundation.js';
import * as outbox from './0002_outbox.js';
import * as evidence from './0003_evidence.js';
import * as identity from './0004_identity.js';
import * as negotiations from './0005_negotiations.js';
import * as transfers from './0006_transfers.js';
import * as dataplane from './0007_dataplane.js';
import * as negotiationFixes from './0008_negotiation_fixes.js';

interface Migration {
  up(knex: Knex): Promise<void>;
  down(knex: Knex): Promise<void>;
}

/** Migrations are listed here, in order, so they ship inside the build (no file globbing at run time). */
const all: Array<[string, Migration]> = [
  ['0001_foundation', foundation],
  ['0002_outbox', outbox],
  ['0003_evidence', evidence],
  ['0004_identity', identity],
  ['0005_negotiations', negotiations],
  ['0006_transfers', transfers],
  ['0007_dataplane', dataplane],
  ['0008_negotiation_fixes', negotiationFixes],
];

export const migrations: Knex.MigrationSource<[string, Migration]> = {
  getMigrations: () => Promise.resolve(all),
  getMigrationName: ([name]) => name,
  getMigration: ([, migration]) => Promise.resolve(migration),
};
