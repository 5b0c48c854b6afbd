/** Evidence: verification of the hash-chained log (spec "Chain verification"). */
import Joi from 'joi';
import { route } from '../routes.js';
import type { Services } from '../services.js';
import { evidenceStore } from '../../db/evidence.js';

const sha256Hex = () => Joi.string().pattern(/^[0-9a-f]{64}$/);

const chainVerification = Joi.object({
  ok: Joi.boolean().required().description('whether the chain is unbroken'),
  entries: Joi.number().integer().min(0).required(),
  head: sha256Hex().allow(null).required().description('hash of the last entry'),
  head_seq: Joi.number().integer().min(1).allow(null).required(),
  first_broken_seq: Joi.number()
    .integer()
    .min(1)
    .allow(null)
    .required()
    .description('the first entry that is missing, altered or out of place'),
  // Anchoring (checkpoints timestamped and witnessed outside the connector) is not built yet.
  last_anchor: Joi.object({
    id: Joi.string().required(),
    seq: Joi.number().integer().required(),
    head: sha256Hex().required(),
    anchored_at: Joi.string().required(),
    receipt: Joi.any(),
    qualified: Joi.boolean(),
  })
    .allow(null)
    .required(),
});

export function evidenceRoutes(services: Services) {
  const { db } = services;
  return [
    route({
      method: 'get',
      path: '/evidence/chain/verify',
      summary: 'Verify the evidence chain: recompute every hash and check every link',
      tag: 'evidence',
      role: 'viewer',
      response: chainVerification,
      handler: () => evidenceStore(db).verify(),
    }),
  ];
}
