/**
 * One dedicated PostgreSQL connection that LISTENs for the data plane's and the gateway's
 * notices (a changed request-log setting, a released lease, access taken away). A pooled
 * connection cannot listen: it goes back to the pool between queries. The connection is
 * re-established with a capped back-off when it drops; notices sent meanwhile are lost, so
 * `onDisconnected` runs when it drops (or stops) and `onConnected` after every (re)connect, and
 * the owners read their state again there.
 */
import pg from 'pg';
import type { Logger } from 'pino';

export interface NotificationHandlers {
  onNotification(channel: string, payload: string | undefined): void;
  /** After the first connect and after every reconnect: read what may have been missed. */
  onConnected(): void;
  /** The connection is gone (dropped or stopped): notices are lost until onConnected. */
  onDisconnected?(): void;
}

const RETRY_MIN_MS = 500;
const RETRY_MAX_MS = 10_000;
/** A connection silently gone (no error, no end) is found by this query failing in time. */
const LIVENESS_QUERY_TIMEOUT_MS = 5_000;

export class PgListener {
  private client: pg.Client | undefined;
  private stopped = false;
  private retryMs = RETRY_MIN_MS;
  private retryTimer: NodeJS.Timeout | undefined;
  private isConnected = false;

  constructor(
    private readonly connectionString: string,
    private readonly channels: readonly string[],
    private readonly handlers: NotificationHandlers,
    private readonly logger: Logger,
  ) {}

  get connected(): boolean {
    return this.isConnected;
  }

  /** Connects once (callers may go on when that fails: reconnecting continues in the background). */
  async start(): Promise<void> {
    await this.connect();
  }

  /** A cheap round trip on the listening connection; a failure drops it and starts reconnecting. */
  async checkAlive(): Promise<void> {
    const client = this.client;
    if (!client || !this.isConnected) return;
    try {
      await client.query({ text: 'SELECT 1', query_timeout: LIVENESS_QUERY_TIMEOUT_MS } as pg.QueryConfig);
    } catch (err) {
      this.dropped(client, err);
    }
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.retryTimer);
    const client = this.client;
    this.client = undefined;
    if (this.isConnected) this.handlers.onDisconnected?.();
    this.isConnected = false;
    await client?.end().catch(() => undefined);
  }

  private async connect(): Promise<void> {
    if (this.stopped) return;
    const client = new pg.Client({ connectionString: this.connectionString, keepAlive: true });
    client.on('error', (err) => this.dropped(client, err));
    client.on('end', () => this.dropped(client, undefined));
    client.on('notification', (n) => this.handlers.onNotification(n.channel, n.payload));
    try {
      await client.connect();
      for (const channel of this.channels) await client.query(`LISTEN ${pg.escapeIdentifier(channel)}`);
    } catch (err) {
      await client.end().catch(() => undefined);
      this.logger.warn({ err }, 'data plane notices: cannot listen; retrying');
      this.scheduleReconnect();
      return;
    }
    if (this.stopped) {
      await client.end().catch(() => undefined);
      return;
    }
    this.client = client;
    this.isConnected = true;
    this.retryMs = RETRY_MIN_MS;
    this.handlers.onConnected();
  }

  private dropped(client: pg.Client, err: unknown) {
    if (client !== this.client || this.stopped) return;
    this.client = undefined;
    this.isConnected = false;
    this.handlers.onDisconnected?.();
    this.logger.warn({ err }, 'data plane notices: the listening connection dropped; reconnecting');
    void client.end().catch(() => undefined);
    this.scheduleReconnect();
  }

  private scheduleReconnect() {
    if (this.stopped) return;
    const delay = this.retryMs;
    this.retryMs = Math.min(this.retryMs * 2, RETRY_MAX_MS);
    this.retryTimer = setTimeout(() => void this.connect(), delay);
    this.retryTimer.unref();
  }
}
