'use strict';
// redis-ratelimit from Node: a typed reply, the HTTP headers, a limiter that remembers refusals
// locally, and a middleware for node's http module. Works over ioredis and node-redis, standalone
// or cluster. The recipe behind each function is in docs/clients.md; test/*.test.js runs it all
// against real servers (`make test-examples`).
//
//   const Redis = require('ioredis');
//   const { Limit, Limiter, fromIoredis, headers } = require('./ratelimit');
//   const perIp = new Limiter(fromIoredis(new Redis()), new Limit('RL.SLIDE', [100, 60000], 'ip'));
//   const d = await perIp.hit('ip:203.0.113.9');  // Decision { allowed: true, limit: 100, ... }
//   headers(d, perIp.limit);                      // [['X-RateLimit-Limit', '100'], ...]

/** retry_after_ms of a request whose cost is above what the limiter can ever hold. */
const NEVER = -1;

/** Milliseconds to whole seconds, rounded up (a wait of 0.7 s is 1 s, never 0). */
const ceilS = (ms) => Math.ceil(ms / 1000);

/**
 * One reply of RL.SLIDE, RL.TOKEN, RL.LEAKY, RL.FIXED, RL.SUBWIN, RL.PEEK, RL.REFUND or RL.CHARGE:
 * [allowed, limit, remaining, retry_after_ms, reset_after_ms] (docs/commands.md, "The reply").
 */
class Decision {
  /**
   * @param {boolean} allowed
   * @param {number} limit the deciding window's limit, or the bucket's size
   * @param {number} remaining units available now, in the tightest window
   * @param {number} retryAfterMs refused: exact wait, or NEVER; allowed: 0, or RL.LEAKY's delay
   * @param {number} resetAfterMs until the limiter is empty again (the key's PTTL)
   * @param {Decision[]} parts RL.ALL: each limiter's own five fields, in key order
   * @param {string|Buffer|null} leaseId RL.ACQUIRE, or its entry in RL.ALL: the lease (null if refused)
   * @param {string|Buffer|null} refusedBy RL.HIT: the policy's limiter that refused (null if allowed)
   */
  constructor(allowed, limit, remaining, retryAfterMs, resetAfterMs, parts = [], leaseId = null, refusedBy = null) {
    Object.assign(this, { allowed, limit, remaining, retryAfterMs, resetAfterMs, parts, leaseId, refusedBy });
    Object.freeze(this);
  }

  /**
   * The typed reply; null for the nil of RL.PEEK/RL.REFUND/RL.CHARGE on a missing key. RL.ALL's
   * reply (five fields, then one five-field array per key) fills `parts`.
   */
  static fromReply(reply) {
    if (reply === null || reply === undefined) return null;
    const bad = (what) => new TypeError(`not ${what}: ${JSON.stringify(reply)}`);
    if (!Array.isArray(reply) || reply.length < 5) throw bad('a five-field rate limiter reply');
    const head = reply.slice(0, 5);
    let rest = reply.slice(5);
    if (head.some(Array.isArray)) throw bad('a five-field rate limiter reply');
    let refusedBy = null;
    if (rest.length >= 2 && !Array.isArray(rest[0])) {
      // RL.HIT: the refusing limiter's name (nil when allowed), then each limiter's fields.
      refusedBy = rest[0];
      rest = rest.slice(1);
    }
    let leaseId = null;
    if (rest.length === 1 && !Array.isArray(rest[0])) {
      // RL.ACQUIRE's sixth field: the lease id (nil when refused).
      leaseId = rest[0];
      rest = [];
    }
    if (rest.some((x) => !Array.isArray(x) || (x.length !== 5 && x.length !== 6))) {
      throw bad('an RL.ALL reply');
    }
    const [allowed, limit, remaining, retry, reset] = head.map(Number);
    const parts = rest.map((x) => Decision.fromReply(x));
    return new Decision(allowed === 1, limit, remaining, retry, reset, parts, leaseId, refusedBy);
  }

  /** Refused for good: the cost is above the limit, waiting does not help. */
  get never() {
    return !this.allowed && this.retryAfterMs === NEVER;
  }

  /** How long an allowed call must wait before acting (RL.LEAKY; 0 for the others). */
  get delayMs() {
    return this.allowed ? this.retryAfterMs : 0;
  }

  /** Retry-After in seconds, rounded up; null when allowed or never. */
  get retryAfterS() {
    if (this.allowed || this.never) return null;
    return Math.max(1, ceilS(this.retryAfterMs));
  }
}

/** A limiter's configuration: its command and the parameters after the key. */
class Limit {
  /**
   * @param {string} command 'RL.SLIDE', 'RL.TOKEN', ...
   * @param {(number|string)[]} params e.g. [10, 1000, 100, 60000] or [100, 60000, 'BURST', 20]
   * @param {string} name the policy's name in RateLimit-Policy
   */
  constructor(command, params, name = 'default') {
    this.command = command.toUpperCase();
    this.params = params.map(String);
    this.name = name;
  }

  args(key, cost = 1) {
    const words = [this.command, key, ...this.params];
    if (cost !== 1) words.push('COST', String(cost));
    return words;
  }

  /** The [quota, windowMs] pairs this call enforces, for RateLimit-Policy. */
  windows() {
    const nums = [];
    for (const p of this.params) {
      if (!/^\d+$/.test(p)) break; // an option word (BURST, MAXDELAY, ALIGN, ...)
      nums.push(Number(p));
    }
    if (this.command !== 'RL.SLIDE') return [[nums[0], nums[1]]];
    const out = [];
    for (let i = 0; i + 1 < nums.length; i += 2) out.push([nums[i], nums[i + 1]]);
    return out;
  }

  windowName(windowMs) {
    return this.windows().length === 1 ? this.name : `${this.name}-${windowMs}ms`;
  }
}

/** The response headers for one decision (docs/clients.md, "Headers"): [name, value] pairs. */
function headers(d, limit) {
  const windows = limit.windows();
  // RL.SLIDE with several windows: the reply's limit is the deciding window's; ties go to the
  // longer window, as the module breaks them. RL.TOKEN/RL.LEAKY report a bucket size instead.
  const deciding =
    windows.filter(([q]) => q === d.limit).sort((a, b) => b[1] - a[1])[0] ?? windows[0];
  const policy = windows
    .map(([q, ms]) => `"${limit.windowName(ms)}";q=${q};w=${ceilS(ms)}`)
    .join(', ');
  let current = `"${limit.windowName(deciding[1])}";r=${d.remaining}`;
  if (!d.never) current += `;t=${ceilS(d.resetAfterMs)}`;
  const out = [
    ['X-RateLimit-Limit', String(d.limit)],
    ['X-RateLimit-Remaining', String(d.remaining)],
    ['X-RateLimit-Reset', String(ceilS(d.resetAfterMs))],
    ['RateLimit-Policy', policy],
    ['RateLimit', current],
  ];
  if (d.retryAfterS !== null) out.push(['Retry-After', String(d.retryAfterS)]);
  return out;
}

/**
 * Refusals remembered per key until their retry_after_ms has passed, so that a refused caller is
 * refused again locally, without a round trip. Conservative: an RL.REFUND elsewhere may free
 * units earlier. Bounded: at most maxKeys keys (the oldest go first).
 */
class RefusalCache {
  constructor(maxKeys = 100000, clock = () => performance.now()) {
    this.entries = new Map(); // key -> { deadline, cost, d, stored }
    this.maxKeys = maxKeys;
    this.clock = clock;
  }

  check(key, cost) {
    const e = this.entries.get(key);
    if (!e) return null;
    const now = this.clock();
    if (now >= e.deadline) {
      this.entries.delete(key);
      return null;
    }
    if (cost < e.cost) return null; // a smaller request may fit: ask Redis
    const passed = Math.floor(now - e.stored);
    const { d } = e;
    return new Decision(
      false,
      d.limit,
      d.remaining,
      Math.max(1, d.retryAfterMs - passed),
      Math.max(0, d.resetAfterMs - passed),
    );
  }

  remember(key, cost, d) {
    if (d.allowed || d.never || d.retryAfterMs <= 0) return;
    const now = this.clock();
    if (this.entries.size >= this.maxKeys) {
      for (const [k, e] of this.entries) if (e.deadline <= now) this.entries.delete(k);
      for (const k of this.entries.keys()) {
        if (this.entries.size < this.maxKeys) break;
        this.entries.delete(k);
      }
    }
    this.entries.delete(key); // re-inserted last: Map order is the age order
    this.entries.set(key, { deadline: now + d.retryAfterMs, cost, d, stored: now });
  }

  get size() {
    return this.entries.size;
  }
}

/**
 * A sender for ioredis: (words, { readOnly }) => Promise<reply>, words[1] being the key.
 *
 * ioredis knows commands from its own table, which has no module command: for RL.* it finds no
 * key, so a Cluster sends the call to a random primary (a MOVED, followed, for two calls in
 * three on three primaries), a cluster pipeline returns the MOVED errors as replies, and
 * `keyPrefix` is not applied. The recipe: a Command that names its key. Its slot routes it,
 * `readOnly` lets `scaleReads: 'slave'` send RL.PEEK to a replica, and the prefix is added here.
 */
function fromIoredis(client) {
  const { Command } = require('ioredis');
  class KeyedCommand extends Command {
    getKeys() {
      return [this.args[this.keyAt || 0]];
    }
  }
  const prefix = (client.options && (client.options.keyPrefix || client.options.redisOptions?.keyPrefix)) || '';
  // keyIndex: the key's place among the words (1; RL.HIT's subject: 2).
  const command = (words, { readOnly = false, keyIndex = 1 } = {}) => {
    const [name, ...args] = words;
    args[keyIndex - 1] = prefix + args[keyIndex - 1];
    const cmd = new KeyedCommand(name, args, { readOnly });
    cmd.keyAt = keyIndex - 1;
    return cmd;
  };
  const send = (words, opts = {}) => client.sendCommand(command(words, opts));
  /** The same command for a pipeline or MULTI: pipeline.sendCommand(command(words)). */
  send.command = command;
  return send;
}

/**
 * A sender for node-redis (createClient or createCluster). A cluster routes a raw command only
 * when given its key: sendCommand(key, isReadonly, words). isReadonly sends RL.PEEK to a replica
 * of a cluster made with `useReplicas: true`.
 */
function fromNodeRedis(client) {
  const isCluster = typeof client.getNodeClientForKey === 'function';
  return (words, { readOnly = false, keyIndex = 1 } = {}) => {
    const strings = words.map(String);
    return isCluster
      ? client.sendCommand(strings[keyIndex], readOnly, strings)
      : client.sendCommand(strings);
  };
}

/**
 * RL.HIT: one decision under a policy the server keeps (RL.POLICY SET), on keys derived from the
 * subject, over a sender (fromIoredis or fromNodeRedis), routed by the subject in a cluster.
 * `refusedBy` names the limiter that refused; `parts` holds each limiter's fields.
 */
async function hit(send, policy, subject, cost = 1) {
  const words = ['RL.HIT', policy, subject];
  if (cost !== 1) words.push('COST', String(cost));
  return Decision.fromReply(await send(words, { keyIndex: 2 }));
}

/** A limiter over a sender (fromIoredis or fromNodeRedis). */
class Limiter {
  /**
   * @param {(words: string[], opts?: {readOnly?: boolean}) => Promise<any>} send
   * @param {Limit} limit
   * @param {RefusalCache | null} cache
   */
  constructor(send, limit, cache = null) {
    Object.assign(this, { send, limit, cache });
  }

  async hit(key, cost = 1) {
    const cached = this.cache && this.cache.check(key, cost);
    if (cached) return cached;
    const d = Decision.fromReply(await this.send(this.limit.args(key, cost)));
    if (this.cache) this.cache.remember(key, cost, d);
    return d;
  }

  async peek(key, { replica = false } = {}) {
    return Decision.fromReply(await this.send(['RL.PEEK', key], { readOnly: replica }));
  }

  async refund(key, cost = 1) {
    return Decision.fromReply(await this.send(['RL.REFUND', key, 'COST', String(cost)]));
  }

  async charge(key, cost) {
    return Decision.fromReply(await this.send(['RL.CHARGE', key, 'COST', String(cost)]));
  }
}

/**
 * Middleware for node's http module: one limiter call per request, its headers on every
 * response, 429 when refused, RL.LEAKY's delay waited before the handler runs.
 *
 *   http.createServer(rateLimit(handler, { limiter, key: (req) => 'ip:' + req.socket.remoteAddress }))
 */
function rateLimit(handler, { limiter, key, cost = () => 1, onError = null }) {
  return async (req, res) => {
    let d;
    try {
      d = await limiter.hit(key(req), cost(req));
    } catch (err) {
      // Redis unreachable or refusing writes: fail open or closed, as the service decides.
      if (onError) return onError(err, req, res, handler);
      res.writeHead(503, { 'Content-Type': 'text/plain' });
      return res.end('rate limiter unavailable\n');
    }
    for (const [name, value] of headers(d, limiter.limit)) res.setHeader(name, value);
    if (!d.allowed) {
      res.writeHead(429, { 'Content-Type': 'text/plain' });
      return res.end(d.never ? 'request larger than the rate limit allows\n' : 'rate limited\n');
    }
    if (d.delayMs > 0) await new Promise((resolve) => setTimeout(resolve, d.delayMs));
    return handler(req, res);
  };
}

module.exports = {
  hit,
  NEVER,
  ceilS,
  Decision,
  Limit,
  headers,
  RefusalCache,
  fromIoredis,
  fromNodeRedis,
  Limiter,
  rateLimit,
};
