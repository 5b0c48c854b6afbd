/** Settings: the data plane's request log (spec "Request-log setting"; gateway/dataplane/request-log.ts). */
import Joi from 'joi';
import { route } from '../routes.js';
import type { Services } from '../services.js';
import { REQUEST_LOG_LEVELS, requestLogStore, type RequestLogSetting } from '../../db/dataplane.js';

const requestLogSetting = Joi.object({
  level: Joi.string()
    .valid(...REQUEST_LOG_LEVELS)
    .required()
    .description(
      'off: nothing; errors: 4xx and 5xx answers; warnings: errors and slow requests; all: every request',
    ),
  slow_ms: Joi.number()
    .integer()
    .min(10)
    .max(60_000)
    .required()
    .description('a data plane request taking longer than this is slow (logged as a warning)'),
});

export function settingRoutes(services: Services) {
  const store = requestLogStore(services.db);
  return [
    route({
      method: 'get',
      path: '/settings/request-log',
      summary: 'The request-log setting of the data plane',
      tag: 'settings',
      role: 'viewer',
      response: requestLogSetting,
      handler: () => store.get(),
    }),
    route<Record<string, string>, Record<string, unknown>, RequestLogSetting>({
      method: 'put',
      path: '/settings/request-log',
      summary: 'Set what the data plane logs; every instance applies it within 10 seconds',
      tag: 'settings',
      role: 'admin',
      body: requestLogSetting,
      response: requestLogSetting,
      handler: ({ body }) => store.put(body),
    }),
  ];
}
