/**
 * The endpoints other connectors call: DSP 2025-1 below /dsp (catalog, negotiations), and the
 * version metadata at /.well-known/dspace-version. Every DSP call carries a connector token.
 */
import Router from '@koa/router';
import type Koa from 'koa';
import { jsonBodies } from '../middleware/json-body.js';
import type { Services } from '../services.js';
import { BUILDING_DATA_CONTEXT_PATH, DSP_BASE_PATH, DSP_VERSION } from '../../domain/dsp.js';
import buildingDataContext from './contexts/building-data-v1.json' with { type: 'json' };
import type { PolicyContext } from '../../domain/policy-evaluation.js';
import { ProtocolAuthError } from '../middleware/connector-auth.js';
import { CatalogError, catalogErrorBody, catalogRoutes } from './catalog.js';
import { DspError, dspErrors, dspNegotiationRoutes } from './negotiations.js';
import { dspTransferRoutes, transferErrors } from './transfers.js';
import { agreementErrors, dspAgreementRoutes } from './agreements.js';
import { AGREEMENT_CONTEXT_DOCUMENT, AGREEMENT_CONTEXT_PATH } from '../../domain/transfer.js';

export function versionRouter(): Router {
  const router = new Router();
  // Unversioned and unauthenticated (DSP common protocol).
  router.get('/.well-known/dspace-version', function dspaceVersion(ctx) {
    ctx.body = { protocolVersions: [{ version: DSP_VERSION, path: DSP_BASE_PATH, binding: 'HTTPS' }] };
  });
  // Our JSON-LD context, named in the messages that carry our terms (domain/dsp.ts).
  router.get(BUILDING_DATA_CONTEXT_PATH, function buildingDataContextDocument(ctx) {
    ctx.type = 'application/ld+json';
    ctx.set('cache-control', 'public, max-age=86400');
    ctx.body = buildingDataContext;
  });
  // The context of our AgreementTerminationMessage (docs/transfers.md), shipped with every connector
  // so that a peer's document loader can fetch it from the party it talks to.
  router.get(AGREEMENT_CONTEXT_PATH, function agreementContextDocument(ctx) {
    ctx.type = 'application/ld+json';
    ctx.set('cache-control', 'public, max-age=86400');
    ctx.body = AGREEMENT_CONTEXT_DOCUMENT;
  });
  return router;
}

/** A refused caller gets the error body of the protocol it called (CatalogError or ContractNegotiationError). */
function refusalsInProtocolShape(authenticatePeer: Koa.Middleware) {
  return async function authenticateConnector(ctx: Koa.Context, next: Koa.Next) {
    try {
      await authenticatePeer(ctx, () => Promise.resolve());
    } catch (err) {
      if (!(err instanceof ProtocolAuthError)) throw err;
      if (ctx.path.startsWith(`${DSP_BASE_PATH}/catalog/`))
        throw new CatalogError(err.status, err.reason, [err.message]);
      throw new DspError(err.status, err.reason, [err.message]);
    }
    await next();
  };
}

/** Catalog errors have their own body type; everything else is a negotiation error. */
function catalogErrors() {
  return async function renderCatalogErrors(ctx: Koa.Context, next: Koa.Next) {
    try {
      await next();
    } catch (err) {
      if (!(err instanceof CatalogError)) throw err;
      ctx.status = err.status;
      ctx.body = catalogErrorBody(err);
    }
  };
}

export function protocolRouter(
  services: Services,
  options: {
    /** Authenticates the calling connector and sets ctx.state.peer = { did }. */
    authenticatePeer: Koa.Middleware;
    policyContext: (ctx: Koa.Context) => Promise<PolicyContext>;
  },
): Router {
  const router = new Router({ prefix: DSP_BASE_PATH });
  router.use(dspErrors(services.logger));
  router.use(catalogErrors());
  router.use(transferErrors());
  router.use(agreementErrors());
  router.use(refusalsInProtocolShape(options.authenticatePeer));
  router.use(
    jsonBodies((err) => {
      throw new DspError(400, 'invalid_message', [`the body is not valid JSON: ${err.message}`]);
    }),
  );
  catalogRoutes(router, services, options.policyContext);
  dspNegotiationRoutes(router, services, options.policyContext);
  dspTransferRoutes(router, services);
  dspAgreementRoutes(router, services);
  return router;
}
