import Joi from 'joi';
import { ApiError } from '../domain/errors.js';
import { isRfc3339 } from '../domain/time.js';

/** `backend.links.x.local_id`, `links[0].object`: the field named the way a caller wrote it. */
export function fieldPath(path: Array<string | number>): string {
  return path.reduce<string>(
    (acc, part) => (typeof part === 'number' ? `${acc}[${part}]` : acc ? `${acc}.${part}` : part),
    '',
  );
}

/** Validates a value against a joi schema; the first problem becomes `invalid_request` naming the field. */
export function validate<T>(schema: Joi.Schema, value: unknown, where: 'body' | 'query' | 'path'): T {
  const { error, value: out } = schema.validate(value, {
    abortEarly: true,
    convert: where !== 'body',
    errors: { wrap: { label: false } },
  });
  if (error) {
    const detail = error.details[0]!;
    const field = fieldPath(detail.path);
    const message = detail.message.replace(
      new RegExp(`^${escapeRegExp(String(detail.context?.label ?? field))} `),
      '',
    );
    throw new ApiError(
      'invalid_request',
      field ? `${field}: ${message}` : `${where}: ${message}`,
      field ? { target: field } : {},
    );
  }
  return out as T;
}

const escapeRegExp = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/** RFC 3339 date-time, strictly (joi's isoDate accepts more than RFC 3339 allows). */
export const dateTime = () =>
  Joi.string()
    .custom(
      (value: string, helpers) => (isRfc3339(value) ? value : helpers.error('string.rfc3339')),
      'RFC 3339 date-time',
    )
    .messages({ 'string.rfc3339': 'must be an RFC 3339 date-time such as 2026-01-31T12:00:00Z' })
    .meta({ format: 'date-time' });

/** `string | null` fields may be null or omitted (spec, Conventions). */
export const nullableString = () => Joi.string().allow(null);
