/**
 * A peer's catalog, for operators: `POST /api/v1/catalog/request` sends a DSP 2025-1
 * CatalogRequestMessage to the counterparty with our connector token and answers its catalog,
 * with a summary of the datasets and offer ids a negotiation needs (`offer_id`, `dataset_id`).
 * The address must be on the host of the counterparty's did:web DID and must not lead into
 * our own network (the rule for callback addresses, api/protocol/callback.ts).
 */
import Joi from 'joi';
import { request } from 'undici';
import { route } from '../routes.js';
import type { Services } from '../services.js';
import { ApiError } from '../../domain/errors.js';
import { DSP_CONTEXT_URL } from '../../domain/dsp.js';
import { callbackProblem } from '../protocol/callback.js';
import { describeAnswer } from '../../domain/outbox.js';

/** A catalog is metadata: more than this is refused rather than buffered. */
const MAX_CATALOG_BYTES = 4 * 1024 * 1024;
const TIMEOUT_MS = 10_000;

interface CatalogRequestBody {
  counterparty_address: string;
  counterparty_did: string;
}

const body = Joi.object<CatalogRequestBody>({
  counterparty_address: Joi.string()
    .uri({ scheme: ['http', 'https'] })
    .max(2000)
    .required()
    .description("the counterparty's DSP base, e.g. https://provider.example/dsp"),
  counterparty_did: Joi.string()
    .pattern(/^did:web:[^\s]+$/)
    .max(500)
    .required()
    .description("the counterparty's participant DID (did:web)"),
});

const datasetSummary = Joi.object({
  dataset_id: Joi.string().required(),
  title: Joi.string().allow(null).required(),
  building_id: Joi.string().allow(null).required(),
  offer_ids: Joi.array().items(Joi.string()).required(),
});

const response = Joi.object({
  counterparty_did: Joi.string().required(),
  counterparty_name: Joi.string().allow(null).required(),
  datasets: Joi.array().items(datasetSummary).required(),
  catalog: Joi.object().unknown(true).required().description('the DSP Catalog as the counterparty sent it'),
});

type Json = Record<string, unknown>;

const asList = (value: unknown): unknown[] => (Array.isArray(value) ? value : value == null ? [] : [value]);
const text = (value: unknown): string | null => (typeof value === 'string' ? value : null);

/** Datasets with their offer ids, also from nested catalogs (DSP allows catalogs of catalogs). */
interface DatasetSummary {
  dataset_id: string;
  title: string | null;
  building_id: string | null;
  offer_ids: string[];
}

function summarize(catalog: Json): DatasetSummary[] {
  const isObject = (v: unknown): v is Json => !!v && typeof v === 'object' && !Array.isArray(v);
  const nested = asList(catalog.catalog).filter(isObject);
  return [
    ...asList(catalog.dataset)
      .filter((d): d is Json => isObject(d) && typeof d['@id'] === 'string')
      .map((d) => ({
        dataset_id: d['@id'] as string,
        title: text(d.title),
        building_id: text(d['pl:building_id']),
        offer_ids: asList(d.hasPolicy)
          .map((p) => (p && typeof p === 'object' ? text((p as Json)['@id']) : null))
          .filter((id): id is string => id !== null),
      })),
    ...nested.flatMap(summarize),
  ];
}

export function catalogRoutes(services: Services) {
  return [
    route<Record<string, string>, Record<string, unknown>, CatalogRequestBody>({
      method: 'post',
      path: '/catalog/request',
      summary: "Read a counterparty's catalog (DSP catalog request with our connector token)",
      tag: 'catalog',
      role: 'operator',
      body,
      response,
      errors: ['upstream_unavailable'],
      handler: async ({ body: input }) => {
        const tokens = services.peerTokens;
        if (!tokens)
          throw new ApiError('unavailable', 'this connector has no identity to call other connectors');
        const base = input.counterparty_address.replace(/\/+$/, '');
        const problem = await callbackProblem(
          base,
          input.counterparty_did,
          services.connector.allowLoopbackPeers ?? false,
        );
        if (problem)
          throw new ApiError(
            'invalid_request',
            problem
              .replace(/the callbackAddress/g, 'counterparty_address')
              .replace("caller's", "counterparty's"),
            { target: 'counterparty_address' },
          );
        let status: number;
        let answer: string;
        try {
          const res = await request(`${base}/catalog/request`, {
            method: 'POST',
            headers: {
              'content-type': 'application/json',
              authorization: `Bearer ${await tokens.issue(input.counterparty_did)}`,
            },
            body: JSON.stringify({
              '@context': [DSP_CONTEXT_URL],
              '@type': 'CatalogRequestMessage',
              filter: [],
            }),
            headersTimeout: TIMEOUT_MS,
            bodyTimeout: TIMEOUT_MS,
            signal: AbortSignal.timeout(TIMEOUT_MS),
          });
          status = res.statusCode;
          const length = Number(res.headers['content-length'] ?? 0);
          if (length > MAX_CATALOG_BYTES) {
            res.body.destroy();
            throw new Error(`its catalog is larger than ${MAX_CATALOG_BYTES} bytes`);
          }
          answer = await readCapped(res.body);
        } catch (err) {
          const e = err as { code?: string; name?: string; message?: string };
          const why =
            e.code === 'ECONNREFUSED'
              ? 'connection refused'
              : e.name === 'TimeoutError'
                ? 'timed out'
                : e.message;
          throw new ApiError('upstream_unavailable', `the counterparty's catalog could not be read: ${why}`);
        }
        if (status < 200 || status >= 300)
          throw new ApiError(
            'upstream_unavailable',
            `the counterparty's catalog could not be read: ${describeAnswer(status, answer)}`,
          );
        let catalog: unknown;
        try {
          catalog = JSON.parse(answer);
        } catch {
          catalog = undefined;
        }
        if (!catalog || typeof catalog !== 'object' || Array.isArray(catalog))
          throw new ApiError(
            'upstream_unavailable',
            'the counterparty answered something that is not a catalog',
          );
        const member = await services.authority?.member(input.counterparty_did).catch(() => null);
        return {
          counterparty_did: input.counterparty_did,
          counterparty_name: member?.name ?? null,
          datasets: summarize(catalog as Json),
          catalog,
        };
      },
    }),
  ];
}

async function readCapped(stream: AsyncIterable<Buffer>): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of stream) {
    size += chunk.length;
    if (size > MAX_CATALOG_BYTES) throw new Error(`its catalog is larger than ${MAX_CATALOG_BYTES} bytes`);
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString('utf8');
}
