'use strict';
// RateLimitClient: every command of the module with a typed result, over ioredis or node-redis
// (standalone or cluster), each call one command routed by its key.

const { Decision, Throttle, policyPage, topEntries } = require('./reply');
const { driverFor } = require('./driver');
const { ModuleNotLoadedError, noLuaTwin } = require('./errors');
const { TWINS } = require('./lua');

/** Per client object: a promise of whether the module is loaded, asked once. */
const checks = new WeakMap();

/**
 * Whether the module is loaded on the server behind `send`: `COMMAND INFO RL.SLIDE` answers a
 * nil entry (or nothing) when it is not. Asked once per client object; a failed check (the
 * server unreachable) is asked again next time. A server that refuses COMMAND (NOPERM) cannot
 * tell: the module is then taken as loaded, and the commands answer for themselves.
 */
function moduleLoaded(send) {
  const owner = typeof send.client === 'object' || typeof send.client === 'function' ? send.client : send;
  let p = checks.get(owner);
  if (!p) {
    p = send(['COMMAND', 'INFO', 'RL.SLIDE'], { keyIndex: null }).then(
      (reply) => Array.isArray(reply) && reply.length > 0 && reply[0] !== null && reply[0] !== undefined,
      (err) => {
        if (/^NOPERM/.test(String(err && err.message))) return true;
        checks.delete(owner);
        throw err;
      },
    );
    checks.set(owner, p);
  }
  return p;
}

const cost = (words, c) => {
  if (c !== undefined && c !== null && c !== 1) words.push('COST', String(c));
  return words;
};
const at = (words, now) => {
  if (now !== undefined && now !== null) words.push('NOW', String(now));
  return words;
};

/**
 * The module's commands with typed results.
 *
 *   const rl = new RateLimitClient(new Redis());                 // or a node-redis client
 *   const d = await rl.slide('user:42', 100, 60000);              // Decision
 *   if (!d.allowed) res.setHeader('Retry-After', d.retryAfterS);
 *
 * Options: `fallback: 'lua'` runs RL.FIXED, RL.SLIDE and RL.TOKEN as Lua scripts when the
 * module is not loaded (the rest then raise ModuleNotLoadedError); without it a missing module
 * is always ModuleNotLoadedError, never a silent fallback.
 */
class RateLimitClient {
  /**
   * @param {object|Function} redis an ioredis Redis or Cluster, a node-redis client or
   *   cluster, or a driver (fromIoredis, fromNodeRedis)
   * @param {{fallback?: 'lua'}} [options]
   */
  constructor(redis, { fallback } = {}) {
    if (fallback !== undefined && fallback !== null && fallback !== 'lua') {
      throw new TypeError(`fallback must be 'lua' or left out, got ${JSON.stringify(fallback)}`);
    }
    this.send = driverFor(redis);
    this.fallback = fallback || null;
    /** The mode once known ('module' or 'lua'), so that later calls do not wait for it. */
    this.known = null;
  }

  /** 'module' when the module is loaded, 'lua' when the fallback stands in; else throws. */
  async mode() {
    if (this.known) return this.known;
    const loaded = await moduleLoaded(this.send);
    if (!loaded && this.fallback !== 'lua') throw new ModuleNotLoadedError();
    this.known = loaded ? 'module' : 'lua';
    return this.known;
  }

  /**
   * Sends one command of the module, raw: `words[keyIndex]` is its key (1 by default; null
   * for none), the first of `keyCount` (RL.ALL's). Checks the module first (once), and runs
   * the Lua twin under the fallback.
   */
  async command(words, { keyIndex = 1, keyCount = 1, readOnly = false } = {}) {
    const mode = this.known || (await this.mode());
    if (mode === 'module') return this.send(words, { keyIndex, keyCount, readOnly });
    const name = String(words[0]).toUpperCase();
    const twin = TWINS[name];
    if (!twin || keyIndex !== 1) throw noLuaTwin(name);
    return twin.run(this.send, [words[1]], words.slice(2));
  }

  /** Throws for a command that only the module has, when the Lua twins stand in for it. */
  async moduleOnly(name) {
    if ((await this.mode()) === 'lua') throw noLuaTwin(name);
  }

  async decide(words, opts) {
    return Decision.fromReply(await this.command(words, opts));
  }

  // Rates -----------------------------------------------------------------------------------

  /**
   * RL.SLIDE: exact rolling windows. `slide(key, 100, 60000)` or, several windows,
   * `slide(key, [[10, 1000], [100, 60000]])`.
   */
  slide(key, limitOrWindows, windowMs, opts) {
    let windows = limitOrWindows;
    if (!Array.isArray(limitOrWindows)) windows = [[limitOrWindows, windowMs]];
    else opts = windowMs;
    const { cost: c, now } = opts || {};
    const words = ['RL.SLIDE', key];
    for (const [l, w] of windows) words.push(String(l), String(w));
    return this.decide(at(cost(words, c), now));
  }

  /** RL.TOKEN: a token bucket (GCRA); `burst` is the bucket's size (default the limit). */
  token(key, limit, windowMs, { burst, cost: c, now } = {}) {
    const words = ['RL.TOKEN', key, String(limit), String(windowMs)];
    if (burst !== undefined) words.push('BURST', String(burst));
    return this.decide(at(cost(words, c), now));
  }

  /** RL.LEAKY: a leaky bucket as a scheduler; an allowed call may carry a delay (`delayMs`). */
  leaky(key, limit, windowMs, { maxDelay, burst, cost: c, now } = {}) {
    const words = ['RL.LEAKY', key, String(limit), String(windowMs)];
    if (maxDelay !== undefined) words.push('MAXDELAY', String(maxDelay));
    if (burst !== undefined) words.push('BURST', String(burst));
    return this.decide(at(cost(words, c), now));
  }

  /** RL.FIXED: a fixed window, opened by the first request (or aligned to the epoch). */
  fixed(key, limit, windowMs, { align = false, cost: c, now } = {}) {
    const words = ['RL.FIXED', key, String(limit), String(windowMs)];
    if (align) words.push('ALIGN');
    return this.decide(at(cost(words, c), now));
  }

  /** RL.SUBWIN: a rolling window approximated by sub-interval counters. */
  subwin(key, limit, windowMs, resolutionMs, { cost: c, now } = {}) {
    const words = ['RL.SUBWIN', key, String(limit), String(windowMs), String(resolutionMs)];
    return this.decide(at(cost(words, c), now));
  }

  /** CL.THROTTLE, redis-cell's command and reply (whole seconds). */
  async throttle(key, maxBurst, countPerPeriod, periodS, { quantity, now } = {}) {
    const words = ['CL.THROTTLE', key, String(maxBurst), String(countPerPeriod), String(periodS)];
    if (quantity !== undefined) words.push(String(quantity));
    return Throttle.fromReply(await this.command(at(words, now)));
  }

  // Leases ----------------------------------------------------------------------------------

  /**
   * RL.ACQUIRE: a unit of a concurrency limit under a lease; `leaseId` on the decision. With
   * `block` (ms, 0 without limit) the call waits for a unit on the server: give the client a
   * command timeout longer than that.
   */
  acquire(key, limit, leaseMs, { id, cost: c, block, now } = {}) {
    const words = ['RL.ACQUIRE', key, String(limit), String(leaseMs)];
    if (id !== undefined) words.push('ID', id);
    cost(words, c);
    if (block !== undefined) words.push('BLOCK', String(block));
    return this.decide(at(words, now));
  }

  /** RL.RELEASE: `allowed` false for a lease that had already ended; the fields are zero for a missing key. */
  release(key, leaseId, { now } = {}) {
    return this.decide(at(['RL.RELEASE', key, leaseId], now));
  }

  /** RL.EXTEND: the lease now ends `leaseMs` from now. */
  extend(key, leaseId, leaseMs, { now } = {}) {
    return this.decide(at(['RL.EXTEND', key, leaseId, String(leaseMs)], now));
  }

  // On any limiter --------------------------------------------------------------------------

  /**
   * RL.PEEK: the state, nothing changed (null for a missing key). With `cost`, what the
   * limiter command would answer for that many units now. `replica: true` lets a cluster
   * client send it to a replica (ioredis: `scaleReads: 'slave'`; node-redis: `useReplicas`).
   */
  peek(key, { cost: c, now, replica = false } = {}) {
    const words = ['RL.PEEK', key];
    if (c !== undefined) words.push('COST', String(c));
    return this.decide(at(words, now), { readOnly: replica });
  }

  /** RL.REFUND: gives back `cost` units (default 1); null for a missing key. */
  refund(key, { cost: c = 1, now } = {}) {
    return this.decide(at(['RL.REFUND', key, 'COST', String(c)], now));
  }

  /** RL.CHARGE: records `cost` units even beyond the limit; null for a missing key. */
  charge(key, c, { now } = {}) {
    return this.decide(at(['RL.CHARGE', key, 'COST', String(c)], now));
  }

  // Across keys and policies ----------------------------------------------------------------

  /**
   * RL.ALL: one all-or-nothing decision over several keys (one slot in a cluster: give them
   * one hash tag). Each limiter: `{ key, kind, params, cost }`, e.g.
   * `{ key: '{u:42}:rpm', kind: 'SLIDE', params: [60, 60000] }`. `parts` holds each one's
   * fields, an ACQUIRE limiter's with its `leaseId`.
   */
  all(limiters, { now } = {}) {
    const words = ['RL.ALL', String(limiters.length)];
    for (const l of limiters) words.push(l.key);
    for (const l of limiters) {
      words.push(String(l.kind).toUpperCase(), ...(l.params || []).map(String));
      cost(words, l.cost);
    }
    return this.decide(at(words, now), { keyIndex: 2, keyCount: limiters.length });
  }

  /**
   * RL.HIT: one decision under a policy the server keeps, routed by the subject. `refusedBy`
   * names the limiter that refused; `parts` holds each limiter's fields.
   */
  hit(policy, subject, { cost: c, now } = {}) {
    return this.decide(at(cost(['RL.HIT', policy, subject], c), now), { keyIndex: 2 });
  }

  /**
   * RL.POLICY SET on every primary (each node of a cluster holds its own policies). `limiters`
   * is a list of `{ name, kind, params }` (`params` with the kind's options, e.g.
   * `[100, 60000, 'COST', 1]`) or the definition's words as one flat list.
   */
  async policySet(name, limiters) {
    const words = ['RL.POLICY', 'SET', name];
    for (const l of limiters) {
      if (l !== null && typeof l === 'object' && !Buffer.isBuffer(l)) {
        words.push(l.name, String(l.kind).toUpperCase(), ...(l.params || []).map(String));
      } else {
        words.push(String(l));
      }
    }
    await this.onPrimaries(words);
  }

  /** RL.POLICY GET: the definition's words, or null (from one node). */
  async policyGet(name) {
    await this.moduleOnly('RL.POLICY');
    const reply = await this.command(['RL.POLICY', 'GET', name], { keyIndex: null });
    return reply === null ? null : reply.map(String);
  }

  /** RL.POLICY DEL on every primary: whether any held it. */
  async policyDel(name) {
    const replies = await this.onPrimaries(['RL.POLICY', 'DEL', name]);
    return replies.some((r) => Number(r) === 1);
  }

  /**
   * One page of RL.POLICY LIST from `cursor` ('0' to start): `{ cursor, policies }`, the
   * cursor '0' when done. In a cluster, pass the same `node` (a driver from
   * `send.primaries()`) for every page: a cursor is one node's.
   */
  async policyPage(cursor = '0', { count, node } = {}) {
    const words = ['RL.POLICY', 'LIST', String(cursor)];
    if (count !== undefined) words.push('COUNT', String(count));
    await this.moduleOnly('RL.POLICY');
    const send = node || (this.send.isCluster ? (await this.send.primaries())[0] : this.send);
    return policyPage(await send(words, { keyIndex: null }));
  }

  /**
   * Every policy, page by page, as `{ name, digest, words }`: `for await (const p of
   * rl.policies()) ...`. In a cluster, one node's (the first primary's, or `node`).
   */
  async *policies({ count, node } = {}) {
    const send = node || (this.send.isCluster ? (await this.send.primaries())[0] : this.send);
    let cursor = '0';
    do {
      const page = await this.policyPage(cursor, { count, node: send });
      yield* page.policies;
      cursor = page.cursor;
    } while (cursor !== '0');
  }

  /**
   * RL.TOP: who is refused most, `[{ name, count, error }]`, most first. Each node counts its
   * own refusals: in a cluster the primaries' entries are added up by name.
   */
  async top({ count, policy } = {}) {
    const words = ['RL.TOP'];
    if (count !== undefined) words.push('COUNT', String(count));
    if (policy !== undefined) words.push('POLICY', policy);
    await this.moduleOnly('RL.TOP');
    if (!this.send.isCluster) return topEntries(await this.send(words, { keyIndex: null }));
    const byName = new Map();
    for (const node of await this.send.primaries()) {
      for (const e of topEntries(await node(words, { keyIndex: null }))) {
        const seen = byName.get(e.name) || { name: e.name, count: 0, error: 0 };
        seen.count += e.count;
        seen.error += e.error;
        byName.set(e.name, seen);
      }
    }
    const all = [...byName.values()].sort((a, b) => b.count - a.count);
    return all.slice(0, count === undefined ? 10 : count);
  }

  /** Sends a command without a key to every primary (the server itself on one node). */
  async onPrimaries(words) {
    await this.moduleOnly(String(words[0]).toUpperCase());
    const nodes = await this.send.primaries();
    return Promise.all(nodes.map((node) => node(words, { keyIndex: null })));
  }
}

module.exports = { RateLimitClient, moduleLoaded };
