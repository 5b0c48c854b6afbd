import type { JWK } from 'jose';
import type { Db } from './knex.js';

/** A row of `connector_keys`: the private half only ever as the encrypted JWE. */
export interface ConnectorKeyRow {
  kid: string;
  alg: string;
  public_jwk: JWK;
  private_key_encrypted: string;
  created_at: Date;
  active: boolean;
}

export function connectorKeyStore(db: Db) {
  return {
    async active(): Promise<ConnectorKeyRow[]> {
      return (await db('connector_keys').where({ active: true }).orderBy('created_at')) as ConnectorKeyRow[];
    },
    async insert(row: Omit<ConnectorKeyRow, 'created_at' | 'active'>): Promise<void> {
      await db('connector_keys').insert({ ...row, public_jwk: JSON.stringify(row.public_jwk) });
    },
  };
}
export type ConnectorKeyStore = ReturnType<typeof connectorKeyStore>;
