'use strict';
// RateLimiterModule: a limiter of rate-limiter-flexible (11.x) on the module, taking
// RateLimiterRedis's options.
//
// RateLimiterRedis keeps, per key, a counter that the first consume after the previous one
// expired creates with a TTL of `duration` seconds: every consume, penalty and reward adds to
// it (refused consumes too: the library decides from the count, `consumedPoints > points`),
// and the key expires with its window. That is RL.FIXED's window with a limit that never
// refuses:
//
//   consume(key, n)   RL.FIXED <key> 4294967295 <duration ms> COST n
//   penalty(key, n)   RL.FIXED <key> 4294967295 <duration ms> COST n  (the same: it opens
//                     a window on a missing key, as RateLimiterRedis does, where RL.CHARGE
//                     answers nil)
//   reward(key, n)    RL.REFUND <key> COST n
//   get(key)          RL.PEEK <key>
//   delete(key)       DEL <key>
//   block(key, s), set(key, n, s), and the block after a consume past `points` with
//   `blockDuration`: one EVALSHA of a script that deletes the key and records n points in a
//   window that ends s seconds from now (RL.FIXED inside the script): RateLimiterRedis's
//   `SET key n EX s`.
//
// consumedPoints = limit - remaining, msBeforeNext = reset_after_ms (the window's end, the
// key's PTTL), remainingPoints = max(points - consumedPoints, 0), isFirstInDuration =
// consumedPoints === the points of this call: RateLimiterRedis's RateLimiterRes, field for
// field. See README.md ("Gaps") for what differs.

const { peer } = require('./driver');
const { clientFor } = require('./http');
const { Script } = require('./lua');

const RateLimiterStoreAbstract = peer('rate-limiter-flexible/lib/RateLimiterStoreAbstract');
const RateLimiterRes = peer('rate-limiter-flexible/lib/RateLimiterRes');

/** The largest RL.FIXED limit: every consume counts, refused ones too. */
const COUNT_ALL = 4294967295;
/** RL.FIXED's longest window. */
const MAX_WINDOW_MS = 2678400000;

/**
 * KEYS[1]; ARGV: points, the block's ms, the limiter's window ms. Deletes the key and opens a
 * window holding `points` that ends `block ms` from now. A block at least as long as the
 * window is a window of its own length; a shorter one is a window of the limiter's length
 * opened as far back as makes it end then (NOW, from the server's own clock), so that the
 * consumes that follow, with the limiter's window, keep its end (a longer window recorded in
 * an open one would move its end later).
 */
const SET_SCRIPT = new Script(`local points, block, window = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('DEL', KEYS[1])
if block >= window then
  return redis.call('RL.FIXED', KEYS[1], '${COUNT_ALL}', block, 'COST', points)
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return redis.call('RL.FIXED', KEYS[1], '${COUNT_ALL}', window, 'COST', points, 'NOW', now - (window - block))
`);

/** A window in ms as RateLimiterRedis makes it: whole seconds (floored), at least one. */
function windowMs(msDuration, what) {
  const ms = Math.floor(Number(msDuration) / 1000) * 1000;
  if (!(ms >= 1000) || ms > MAX_WINDOW_MS) {
    throw new RangeError(
      `${what} must be from 1 to 2678400 seconds (RL.FIXED's windows end: 0, "never expires", is not available), got ${msDuration / 1000}`,
    );
  }
  return ms;
}

class RateLimiterModule extends RateLimiterStoreAbstract {
  /**
   * @param {object} opts RateLimiterRedis's options: `storeClient` (ioredis Redis or Cluster,
   *   node-redis client or cluster), `points`, `duration` (seconds, 1 to 31 days),
   *   `blockDuration`, `keyPrefix` (default 'rlflx'), `execEvenly`, `execEvenlyMinDelayMs`,
   *   `inMemoryBlockOnConsumed`, `inMemoryBlockDuration`, `blockOnConsumed`,
   *   `insuranceLimiter`, `rejectIfRedisNotReady`; and `fallback: 'lua'` (consume and penalty
   *   only: the rest need the module).
   */
  constructor(opts = {}) {
    super(opts);
    if (opts.customIncrTtlLuaScript !== undefined) {
      throw new TypeError("customIncrTtlLuaScript is RateLimiterRedis's own script: RateLimiterModule counts with RL.FIXED, no script");
    }
    this.client = opts.storeClient;
    this._fallback = opts.fallback;
    this._rl = null;
    this._rejectIfRedisNotReady = !!opts.rejectIfRedisNotReady;
    windowMs(this.msDuration, 'duration');
  }

  /** The RateLimitClient over `storeClient`, made at the first call. */
  get rl() {
    if (!this._rl) this._rl = clientFor(this.client, { fallback: this._fallback });
    return this._rl;
  }

  /**
   * Whether the client can take a command for `rlKey` now, asked only with
   * `rejectIfRedisNotReady`: the checks RateLimiterRedis makes.
   */
  _isRedisReady(rlKey, readOnly) {
    if (!this._rejectIfRedisNotReady) return true;
    const c = this.client;
    if (c.status) return c.status === 'ready'; // ioredis
    if (typeof c.isReady === 'function') return c.isReady(); // node-redis 3
    if (typeof c.isReady === 'boolean') return c.isReady; // node-redis 4 and later
    if (c._slots && typeof c._slots.getClient === 'function') {
      // A node-redis cluster: open, and the key's node ready.
      if (typeof c.isOpen === 'boolean' && !c.isOpen) return false;
      try {
        const node = c._slots.getClient(rlKey, readOnly);
        return Boolean(node) && node.isReady === true;
      } catch {
        return false;
      }
    }
    return true;
  }

  /**
   * One command: RL.FIXED for points added (consume, penalty), RL.REFUND for points taken
   * back (reward), the set script for `forceExpire` (block, set). Resolves to the Decision.
   */
  async _upsert(rlKey, points, msDuration, forceExpire = false) {
    if (typeof points === 'string') {
      if (!/^-?[1-9][0-9]*$/.test(points)) {
        throw new Error('Consuming string different than integer values is not supported by this package');
      }
      points = Number(points);
    } else if (!Number.isInteger(points)) {
      throw new Error('Consuming decimal number of points is not supported by this package');
    }
    if (!this._isRedisReady(rlKey, false)) throw new Error('Redis connection is not ready');
    if (forceExpire) {
      const block = windowMs(msDuration, 'a block or set duration');
      await this.rl.moduleOnly('RL.FIXED in a script (block, set)');
      if (points < 0) throw new RangeError('a key cannot be set to negative points here: the module counts from zero');
      const window = windowMs(this.msDuration, 'duration');
      return SET_SCRIPT.run(this.rl.send, [rlKey], [String(points), String(block), String(window)]);
    }
    if (points < 0) return this.rl.refund(rlKey, { cost: -points });
    return this.rl.fixed(rlKey, COUNT_ALL, windowMs(msDuration, 'duration'), { cost: points });
  }

  /** RL.PEEK: the key's window, or null when there is none (or it has ended). */
  async _get(rlKey) {
    if (!this._isRedisReady(rlKey, true)) throw new Error('Redis connection is not ready');
    const d = await this.rl.peek(rlKey);
    if (d === null || (d.limit === d.remaining && d.resetAfterMs === 0)) return null;
    return d;
  }

  /** DEL: whether there was a key. */
  async _delete(rlKey) {
    return Number(await this.rl.send(['DEL', rlKey])) > 0;
  }

  /**
   * RateLimiterRes from a Decision (null: a reward on a missing key, which the module leaves
   * missing: nothing consumed, nothing to wait for).
   */
  _getRateLimiterRes(rlKey, changedPoints, d) {
    const res = new RateLimiterRes();
    if (d === null || d === undefined) {
      res.consumedPoints = 0;
      res.remainingPoints = Math.max(this.points, 0);
      res.msBeforeNext = 0;
      res.isFirstInDuration = false;
      return res;
    }
    res.consumedPoints = d.limit - d.remaining;
    res.isFirstInDuration = res.consumedPoints === changedPoints;
    res.remainingPoints = Math.max(this.points - res.consumedPoints, 0);
    res.msBeforeNext = d.resetAfterMs;
    return res;
  }
}

module.exports = { RateLimiterModule, COUNT_ALL, SET_SCRIPT };
