/**
 * DSP catalog: our offers as datasets, each with its ODRL offer (from the contract policy),
 * shown only to participants the offer's access policy lets see it.
 */
import type Router from '@koa/router';
import type Koa from 'koa';
import type { Services } from '../services.js';
import type { OfferRecord } from '../../db/offers.js';
import { policyStore } from '../../db/policies.js';
import { productStore, type ProductRecord } from '../../db/products.js';
import { DSP_CONTEXT_URL, buildingDataContextUrl, messageContext } from '../../domain/dsp.js';
import { toOdrl } from '../../domain/policy.js';
import { permits, type PolicyContext } from '../../domain/policy-evaluation.js';
import { catalogRequestSchema } from './schemas.js';

export class CatalogError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    readonly reasons: string[],
  ) {
    super(reasons.join('; '));
  }
}

export const catalogErrorBody = (e: CatalogError) => ({
  '@context': [DSP_CONTEXT_URL],
  '@type': 'CatalogError',
  code: e.code,
  reason: e.reasons,
});

export function catalogRoutes(
  router: Router,
  services: Services,
  policyContext: (ctx: Koa.Context) => Promise<PolicyContext>,
) {
  const { db } = services;
  // DSP's context, then ours (its `pl:` terms): URLs only, as the 2025-1 schemas require.
  const catalogContext = messageContext(buildingDataContextUrl(services.connector.publicUrl));
  const dataService = () => ({
    '@id': `${services.connector.dspAddress}#dsp`,
    '@type': 'DataService',
    endpointURL: services.connector.dspAddress,
  });

  async function dataset(product: ProductRecord, offers: OfferRecord[]) {
    const hasPolicy = [];
    for (const offer of offers) {
      const contract = await policyStore(db).get(offer.contract_policy_id);
      if (!contract) continue;
      const odrl = toOdrl(offer.id, contract);
      // A rule list, when present, has at least one rule (ODRL and the DSP schemas).
      const rules = Object.fromEntries(
        (['permission', 'prohibition', 'obligation'] as const)
          .map((key) => [key, odrl[key]] as const)
          .filter(([, list]) => Array.isArray(list) && list.length > 0),
      );
      hasPolicy.push({ '@id': offer.id, '@type': 'Offer', ...rules });
    }
    return {
      '@id': product.id,
      '@type': 'Dataset',
      title: product.title,
      ...(product.description ? { description: product.description } : {}),
      ...(product.keywords.length ? { keyword: product.keywords } : {}),
      // A product's building is published in the catalog (issue: building_id).
      'pl:building_id': product.objects[0] ?? null,
      'pl:objects': product.objects,
      'pl:profile': product.profile,
      hasPolicy,
      distribution: [{ '@type': 'Distribution', format: 'HttpData-PULL', accessService: dataService() }],
    };
  }

  /** The offers a participant may see, grouped by product. */
  async function visible(ctx: Koa.Context, only?: string) {
    const policyCtx = await policyContext(ctx);
    const byProduct = new Map<string, OfferRecord[]>();
    const offers: OfferRecord[] = await db('offers')
      .orderBy('seq')
      .modify((q) => void (only ? q.where({ asset_id: only }) : q));
    for (const offer of offers) {
      const access = await policyStore(db).get(offer.access_policy_id);
      if (!access || !permits(access, policyCtx)) continue;
      byProduct.set(offer.asset_id, [...(byProduct.get(offer.asset_id) ?? []), offer]);
    }
    return byProduct;
  }

  router.post('/catalog/request', async function catalogRequest(ctx) {
    const { error } = catalogRequestSchema.validate(ctx.request.body);
    if (error) throw new CatalogError(400, 'invalid_message', [error.message]);
    const datasets = [];
    for (const [productId, offers] of await visible(ctx)) {
      const product = await productStore(db).get(productId);
      if (product) datasets.push(await dataset(product, offers));
    }
    ctx.body = {
      '@context': catalogContext,
      '@id': `${services.connector.dspAddress}#catalog`,
      '@type': 'Catalog',
      participantId: services.connector.did,
      dataset: datasets,
      service: [dataService()],
    };
  });

  router.get('/catalog/datasets/:id', async function datasetRequest(ctx) {
    const id = ctx.params.id!;
    const offers = (await visible(ctx, id)).get(id);
    const product = offers ? await productStore(db).get(id) : undefined;
    if (!product || !offers) throw new CatalogError(404, 'not_found', [`no dataset ${id}`]);
    ctx.body = { '@context': catalogContext, ...(await dataset(product, offers)) };
  });
}
