// The ES module entries: the same objects as the CommonJS ones (one module check per client,
// whichever way the application loads the package), found by the package's own name.
import test from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import rl, { RateLimitClient, Decision, RateLimitStore, ModuleNotLoadedError, VERSION } from 'redis-ratelimit-client';
import { RateLimitStore as Store, COUNT_ALL } from 'redis-ratelimit-client/express-rate-limit';
import { RateLimiterModule } from 'redis-ratelimit-client/rate-limiter-flexible';

const require = createRequire(import.meta.url);

test('import and require give the same objects', () => {
  const cjs = require('redis-ratelimit-client');
  assert.equal(RateLimitClient, cjs.RateLimitClient);
  assert.equal(Decision, cjs.Decision);
  assert.equal(ModuleNotLoadedError, cjs.ModuleNotLoadedError);
  assert.equal(rl, cjs);
  assert.equal(VERSION, cjs.VERSION);
  assert.equal(Store, RateLimitStore);
  assert.equal(COUNT_ALL, 4294967295);
  assert.equal(RateLimiterModule, require('redis-ratelimit-client/rate-limiter-flexible').RateLimiterModule);
  assert.equal(Decision.fromReply([1, 3, 2, 0, 1000]).remaining, 2);
});
