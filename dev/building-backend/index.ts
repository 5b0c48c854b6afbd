/** Public face of the sample building backend, for dev/start.ts, tests and benchmarks. */
export {
  createBuildingBackend,
  startBuildingBackend,
  type BuildingBackend,
  type BuildingBackendOptions,
  type RunningBuildingBackend,
} from './server.js';
export { loadBuildings, type BuildingsFile, type BuildingRecord, type PointRecord } from './building-data.js';

/** Key the demo stack and `main.ts` give the backend when none is configured. */
export const DEMO_BACKEND_KEY = 'demo-backend-key';
