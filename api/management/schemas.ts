/** joi schemas shared by several management routes (backend bindings, paging, ids). */
import Joi from 'joi';
import { PROVIDES } from '../../domain/sources.js';
import { patternProblem } from '../../domain/path-patterns.js';
import { RESOURCE_ID_PATTERN } from '../../domain/ids.js';
import { DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, decodeCursor } from '../../domain/paging.js';
import { dateTime, nullableString } from '../validation.js';

export const HTTP_METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'] as const;

export const resourceId = () =>
  Joi.string().pattern(RESOURCE_ID_PATTERN).messages({
    'string.pattern.base': 'must start with a letter or digit and use only letters, digits, . _ : -',
  });

export const idParams = Joi.object({ id: Joi.string().min(1).max(256).required() });

export const pageQuery = Joi.object({
  cursor: Joi.string()
    .custom((v: string, h) => (decodeCursor(v) === null ? h.error('cursor.invalid') : v))
    .messages({ 'cursor.invalid': 'is not a cursor this list gave out' }),
  limit: Joi.number().integer().min(1).max(MAX_PAGE_SIZE).default(DEFAULT_PAGE_SIZE),
});

export const pageOf = (item: Joi.Schema) =>
  Joi.object({ items: Joi.array().items(item).required(), next_cursor: Joi.string().allow(null).required() });

export const toPageRequest = (q: { cursor?: string; limit: number }) => ({
  limit: q.limit,
  after: q.cursor === undefined ? null : decodeCursor(q.cursor),
});

const pathPattern = Joi.string()
  .min(1)
  .custom((v: string, h) => {
    const problem = patternProblem(v);
    return problem ? h.message({ custom: `'${v}' ${problem}` }) : v;
  });

const headerName = Joi.string()
  .pattern(/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/)
  .messages({ 'string.pattern.base': 'must be an HTTP header name' });

/**
 * Object ids and the system's local ids become path segments (`v1/buildings/{local id}/**`):
 * letters, digits and `. _ : -` only, so that an id can never widen what a binding lets through.
 */
export const OBJECT_ID_PATTERN = /^(?!\.{1,2}$)[A-Za-z0-9._:-]{1,256}$/;
export const objectId = () =>
  Joi.string().pattern(OBJECT_ID_PATTERN).messages({
    'string.pattern.base': 'must be letters, digits and . _ : - only (it becomes a path segment)',
  });

/** A base URL that carries no credentials: keys travel in the key header, where they are masked. */
export const baseUrl = () =>
  Joi.string()
    .uri({ scheme: ['http', 'https'] })
    .custom((v: string, h) => {
      const u = new URL(v);
      return u.username || u.password
        ? h.message({ custom: 'must not carry credentials; put the key in auth_header_value' })
        : v;
    });

/** A path below the base URL: relative, no `.`/`..` segments, no scheme. */
export const relativePath = () =>
  Joi.string()
    .max(2048)
    .custom((v: string, h) => {
      const p = v.split(/[?#]/)[0]!;
      const bad =
        /^[a-z][a-z0-9+.-]*:/i.test(v) ||
        v.startsWith('//') ||
        p.split('/').some((s) => s === '.' || s === '..') ||
        /%2e|%2f|\\/i.test(p);
      return bad
        ? h.message({ custom: 'must be a path below the base URL (no scheme, no . or .. segments)' })
        : v;
    });

export const linkDetail = Joi.object({
  local_id: objectId().allow(null),
  auth_header_value: nullableString(),
  provides: Joi.string()
    .valid(...PROVIDES)
    .allow(null),
});

export const link = linkDetail.keys({ object: objectId().required() });

export const backendBinding = Joi.object({
  base_url: baseUrl().required(),
  auth_header_name: headerName.allow(null),
  auth_header_value: nullableString(),
  allowed_methods: Joi.array()
    .items(Joi.string().valid(...HTTP_METHODS))
    .unique(),
  allowed_paths: Joi.array().items(pathPattern).unique(),
  links: Joi.object().pattern(OBJECT_ID_PATTERN, linkDetail),
});

/** An entry of a process's history (negotiations, transfers): spec "Negotiation" history. */
export const historyEntry = Joi.object({
  at: dateTime(),
  state: Joi.string(),
  message_type: Joi.string().allow(null),
  direction: Joi.string().allow(null),
  evidence_id: Joi.string().allow(null),
  note: Joi.string().allow(null),
});
