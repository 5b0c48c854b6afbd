import { koaBody } from 'koa-body';

/** JSON bodies only, up to 1 MiB, strict (objects and arrays); every surface parses them alike. */
export function jsonBodies(onError?: (err: Error) => void) {
  return koaBody({
    jsonLimit: '1mb',
    json: true,
    urlencoded: false,
    multipart: false,
    text: false,
    jsonStrict: true,
    ...(onError ? { onError: (err: Error) => onError(err) } : {}),
  });
}
