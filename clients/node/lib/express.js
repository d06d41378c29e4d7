'use strict';
// RateLimitStore: a Store of express-rate-limit (8.x) on the module.
//
// express-rate-limit counts every hit of a key in a fixed window of `windowMs` that opens at
// the first hit after the previous window ended, and decides by itself: a request is refused
// when the count passes `limit` (its own option, possibly a function of the request). So the
// store must count exactly as its MemoryStore does, refusals included, and never refuse:
//
//   increment(key)  RL.FIXED <prefix+key> 4294967295 <windowMs>
//                   the module's fixed window (opened by the first request, ended windowMs
//                   later) with the largest limit: every hit counts, up to 2^32 - 1 in a window.
//                   totalHits = limit - remaining; resetTime = now + reset_after_ms.
//   decrement(key)  RL.REFUND <prefix+key>       (skipFailedRequests / skipSuccessfulRequests)
//   get(key)        RL.PEEK <prefix+key>         (undefined for a missing key)
//   resetKey(key)   DEL <prefix+key>
//
// Each is one command, routed by its key in a cluster. See README.md ("Gaps") for what the
// Store interface cannot carry.

const { clientFor } = require('./http');

/** The largest RL.FIXED limit: the count is 32-bit. */
const COUNT_ALL = 4294967295;

class RateLimitStore {
  /**
   * @param {object} options
   * @param {object|Function} options.client a RateLimitClient, an ioredis Redis or Cluster, a
   *   node-redis client or cluster, or a driver
   * @param {string} [options.prefix='rl:'] prepended to every key (after the client's own
   *   keyPrefix, when it has one)
   * @param {'lua'} [options.fallback] run RL.FIXED as its Lua twin when the module is missing
   *   (increment and resetKey only: decrement and get need the module; a RateLimitClient
   *   given as `client` keeps its own)
   */
  constructor({ client, prefix = 'rl:', fallback } = {}) {
    if (!client) throw new TypeError('RateLimitStore needs a client');
    this.client = clientFor(client, { fallback });
    this.prefix = prefix;
    /** Keys live in Redis, shared by every process that uses it. */
    this.localKeys = false;
    this.windowMs = 60000;
    this.initError = null;
  }

  /** Called by express-rate-limit with its options: takes `windowMs`. */
  init(options) {
    const ms = Number(options.windowMs);
    this.initError = null;
    if (!Number.isInteger(ms) || ms < 1 || ms > 2678400000) {
      // express-rate-limit logs what init throws and goes on: every increment throws it too.
      this.initError = new RangeError(
        `windowMs must be an integer from 1 to 2678400000 (31 days, RL.FIXED's longest window), got ${options.windowMs}`,
      );
      throw this.initError;
    }
    this.windowMs = ms;
  }

  key(key) {
    return this.prefix + key;
  }

  info(d) {
    return { totalHits: d.limit - d.remaining, resetTime: new Date(Date.now() + d.resetAfterMs) };
  }

  /** Counts one hit: `{ totalHits, resetTime }` of the window it falls in. */
  async increment(key) {
    if (this.initError) throw this.initError;
    return this.info(await this.client.fixed(this.key(key), COUNT_ALL, this.windowMs));
  }

  /** Takes one hit back from the current window (a window counted down to zero ends). */
  async decrement(key) {
    await this.client.refund(this.key(key));
  }

  /** The hits of the current window, or undefined when there is none. */
  async get(key) {
    const d = await this.client.peek(this.key(key));
    return d === null ? undefined : this.info(d);
  }

  /** Forgets the key's window. */
  async resetKey(key) {
    await this.client.send(['DEL', this.key(key)]);
  }
}

module.exports = { RateLimitStore, COUNT_ALL };
