/** The platform's profile IRIs (spec "Versioning" 3): the data profile, version 1, and its topology profile. */
export const DATA_PROFILE = 'https://w3id.org/building-data/profile/v1';
export const TOPOLOGY_PROFILE = 'https://w3id.org/building-data/profile/topology/v1';
export const PROFILES = [DATA_PROFILE, TOPOLOGY_PROFILE] as const;
export const PLATFORM_VERSION = '1.0';
