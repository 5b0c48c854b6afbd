import type { Logger } from 'pino';
import type { Client } from '@temporalio/client';
import type { Db } from '../db/knex.js';

/** What route handlers may use: storage, the Temporal client, logging. Built once per process. */
export interface Services {
  db: Db;
  logger: Logger;
  temporal: Client | null;
  taskQueue: string;
  version: string;
}
