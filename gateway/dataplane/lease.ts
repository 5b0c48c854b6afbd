/**
 * Which of several data plane instances on one database serves: the holder of a PostgreSQL
 * lease with a short TTL (DATAPLANE_LEASE_TTL, default 10 s). The holder renews it every third
 * of the TTL; the others try as often and take it once it has run out, so a dead instance is
 * replaced within about 1⅓ TTL. A clean stop releases the lease and notifies the others, who
 * take over at once.
 *
 * The holder counts its lease from the moment it *sent* the statement that took or renewed it
 * (on its own monotonic clock). The database dates the lease from a later instant, so the
 * holder always stops believing in its lease before any other instance can take it: two
 * instances never serve at once, even when the holder cannot reach the database to renew.
 */
import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import type { Knex } from 'knex';
import { dataplaneLeaseStore } from '../../db/dataplane.js';

export const DATAPLANE_LEASE = 'dataplane';

export class DataPlaneLease {
  readonly holder = randomUUID();
  /** performance.now() until which our lease certainly holds; 0 when we hold none. */
  private validUntil = 0;
  /** performance.now() when another holder's lease runs out, as last seen. */
  private othersUntil = 0;
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  private attempting: Promise<void> | undefined;

  constructor(
    private readonly db: Knex,
    private readonly ttlMs: number,
    private readonly logger: Logger,
  ) {}

  isActive(): boolean {
    return performance.now() < this.validUntil;
  }

  /** When a standby instance expects the active one's lease to end, if it does not renew (ms, ≥ 1 s). */
  retryAfterMs(): number {
    return Math.max(1_000, Math.min(this.ttlMs, Math.ceil(this.othersUntil - performance.now())));
  }

  /** Tries once (a first instance serves as soon as it is started), then keeps trying. */
  async start(): Promise<void> {
    await this.attempt();
    this.schedule();
  }

  /** Another instance released the lease: try now rather than at the next tick. */
  released(): void {
    if (!this.stopped && !this.isActive()) void this.attempt();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.attempting;
    // Released even when we do not think we hold it: an attempt cut short by the stop may have won it.
    this.validUntil = 0;
    try {
      await dataplaneLeaseStore(this.db).release(DATAPLANE_LEASE, this.holder);
    } catch (err) {
      this.logger.warn(
        { err },
        'data plane lease: cannot release; another instance takes over when it runs out',
      );
    }
  }

  private attempt(): Promise<void> {
    this.attempting ??= this.tryOnce().finally(() => (this.attempting = undefined));
    return this.attempting;
  }

  private async tryOnce(): Promise<void> {
    const sent = performance.now();
    const wasActive = this.isActive();
    try {
      const lease = await dataplaneLeaseStore(this.db).acquire(DATAPLANE_LEASE, this.holder, this.ttlMs);
      if (this.stopped) return;
      if (lease.holder === this.holder) {
        this.validUntil = sent + this.ttlMs;
        if (!wasActive) this.logger.info({ holder: this.holder }, 'data plane: this instance is active');
      } else {
        this.validUntil = 0;
        // The other lease's end in our clock: its remaining time as the database sees it.
        this.othersUntil = performance.now() + lease.remaining_ms;
        if (wasActive)
          this.logger.warn({ holder: lease.holder }, 'data plane: another instance took over; standing by');
      }
    } catch (err) {
      // Our lease (if any) holds until validUntil; after that we stand by by ourselves.
      this.logger.warn({ err }, 'data plane lease: cannot reach the database');
    }
  }

  private schedule() {
    if (this.stopped) return;
    this.timer = setTimeout(
      () => void this.attempt().finally(() => this.schedule()),
      Math.max(200, Math.floor(this.ttlMs / 3)),
    );
    this.timer.unref();
  }
}
