/**
 * The data plane's request log (spec "Request-log setting"): which data plane requests are
 * logged, set with `PUT /api/v1/settings/request-log` and picked up by every instance within
 * seconds.
 *
 *   off       nothing
 *   errors    answers with status 4xx or 5xx
 *   warnings  errors, and requests slower than slow_ms (logged as warnings)
 *   all       every request
 *
 * Pickup: the PUT sends a NOTIFY in its transaction; each instance LISTENs and reads the
 * setting when told (milliseconds). A read after every (re)connect of the listening connection
 * covers notices lost while it was down. The safety net is a poll every 8 s (one primary-key
 * read; it also proves the listening connection alive): it alone keeps the spec's 10 seconds
 * when notices are lost in ways nobody can see, such as a silently dead connection.
 */
import type { Context, Next } from 'koa';
import type { Logger } from 'pino';
import type { Knex } from 'knex';
import { DEFAULT_REQUEST_LOG, requestLogStore, type RequestLogSetting } from '../../db/dataplane.js';
import type { PgListener } from './notifications.js';

/** Under the spec's 10 s with room for the read itself; notices make pickup immediate. */
const SAFETY_POLL_MS = 8_000;

export class RequestLogWatcher {
  private setting: RequestLogSetting = DEFAULT_REQUEST_LOG;
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  /** Reads never overlap; a notice during a read makes one more read after it. */
  private reading: Promise<void> | undefined;
  private again = false;

  constructor(
    private readonly db: Knex,
    private readonly logger: Logger,
    private readonly listener: Pick<PgListener, 'checkAlive'> | undefined,
  ) {}

  get current(): RequestLogSetting {
    return this.setting;
  }

  async start(): Promise<void> {
    await this.refresh();
    this.schedule();
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
  }

  /** Reads the stored setting now (on a notice, a reconnect, or the poll). */
  refresh(): Promise<void> {
    if (this.reading) {
      this.again = true;
      return this.reading;
    }
    this.reading = (async () => {
      do {
        this.again = false;
        try {
          this.apply(await requestLogStore(this.db).get());
        } catch (err) {
          this.logger.warn({ err }, 'request log: cannot read the setting; the previous one stays in force');
        }
      } while (this.again && !this.stopped);
    })().finally(() => (this.reading = undefined));
    return this.reading;
  }

  private apply(next: RequestLogSetting) {
    const before = this.setting;
    this.setting = next;
    if (before.level !== next.level || before.slow_ms !== next.slow_ms)
      this.logger.info({ requestLog: next }, 'request log setting in force');
  }

  private schedule() {
    if (this.stopped) return;
    this.timer = setTimeout(() => {
      void (async () => {
        await this.listener?.checkAlive();
        await this.refresh();
        this.schedule();
      })();
    }, SAFETY_POLL_MS);
    this.timer.unref();
  }
}

/** What a data plane request tells the log, besides method, path, status and time. */
export interface RequestLogFacts {
  transferId?: string;
  consumerDid?: string;
  buildingId?: string;
  errorCode?: string;
}

/**
 * Logs each data plane request as the setting says. A line is written only when the setting
 * and the logger's own level both let it through: LOG_LEVEL stays the operator's last word.
 */
export function requestLogging(
  logger: Logger,
  setting: () => RequestLogSetting,
  facts: (ctx: Context) => RequestLogFacts,
) {
  return async function logDataplaneRequest(ctx: Context, next: Next) {
    const started = performance.now();
    try {
      await next();
    } finally {
      const { level, slow_ms: slowMs } = setting();
      if (level !== 'off') {
        const ms = performance.now() - started;
        const failed = ctx.status >= 400;
        const slow = ms > slowMs;
        const logged = level === 'all' || failed || (level === 'warnings' && slow);
        if (logged) {
          const f = facts(ctx);
          const line = {
            dataplane: {
              request_id: ctx.state.requestId as string | undefined,
              method: ctx.method,
              path: ctx.path,
              status: ctx.status,
              ms: Math.round(ms),
              ...(slow ? { slow: true } : {}),
              ...(f.errorCode ? { error_code: f.errorCode } : {}),
              ...(f.buildingId ? { building_id: f.buildingId } : {}),
              ...(f.transferId ? { transfer_id: f.transferId } : {}),
              ...(f.consumerDid ? { consumer: f.consumerDid } : {}),
            },
          };
          if (ctx.status >= 500) logger.error(line, 'data plane request failed');
          else if (failed) logger.warn(line, 'data plane request refused');
          else if (slow) logger.warn(line, 'data plane request slow');
          else logger.info(line, 'data plane request');
        }
      }
    }
  };
}
