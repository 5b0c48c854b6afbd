// Every workflow type the worker runs. Workflow code is deterministic: see eslint.config.js.
export { outboxDelivery } from './outbox-delivery.js';
export { negotiation } from './negotiation.js';
export { transfer, agreementTermination } from './transfer.js';
