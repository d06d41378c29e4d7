// The ES module entry: the same objects as the CommonJS one (index.js), so that code mixing
// import and require shares one module check per client.
import cjs from './index.js';

export const {
  VERSION,
  RateLimitClient,
  Decision,
  Throttle,
  NEVER,
  ceilS,
  ModuleNotLoadedError,
  MODULE_NOT_LOADED,
  fromIoredis,
  fromNodeRedis,
  driverFor,
  Limit,
  headers,
  RefusalCache,
  Limiter,
  hit,
  rateLimit,
  RateLimitStore,
} = cjs;
export default cjs;
