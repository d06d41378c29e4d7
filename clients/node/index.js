'use strict';
// redis-ratelimit-client: the commands of the redis-ratelimit module with typed results, over
// ioredis or node-redis, standalone or in Redis Cluster; headers; a store for
// express-rate-limit (here, and in ./express-rate-limit) and a limiter for
// rate-limiter-flexible (./rate-limiter-flexible). See README.md.

const { NEVER, ceilS, Decision, Throttle } = require('./lib/reply');
const { MODULE_NOT_LOADED, ModuleNotLoadedError } = require('./lib/errors');
const { fromIoredis, fromNodeRedis, driverFor } = require('./lib/driver');
const { RateLimitClient } = require('./lib/client');
const { Limit, headers, RefusalCache, Limiter, hit, rateLimit } = require('./lib/http');
const { RateLimitStore } = require('./lib/express');
const { version: VERSION } = require('./package.json');

module.exports = {
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
};
