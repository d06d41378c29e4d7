'use strict';
// HTTP: a limiter's configuration (Limit), the response headers of one decision, a limiter
// that remembers refusals locally, and a middleware for node's http module (docs/clients.md,
// "Headers" and "The local refusal cache").

const { Decision, ceilS } = require('./reply');
const { RateLimitClient } = require('./client');

/** A limiter's configuration: its command and the parameters after the key. */
class Limit {
  /**
   * @param {string} command 'RL.SLIDE', 'RL.TOKEN', 'RL.LEAKY', 'RL.FIXED' or 'RL.SUBWIN'
   * @param {(number|string)[]} params e.g. [10, 1000, 100, 60000] or [100, 60000, 'BURST', 20]
   * @param {string} name the policy's name in RateLimit-Policy
   */
  constructor(command, params, name = 'default') {
    this.command = command.toUpperCase();
    this.params = params.map(String);
    this.name = name;
  }

  /** The command's words for `key` and `cost`. */
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

  /** The name of one window in the fields: the limit's name, or `<name>-<ms>ms` among several. */
  windowName(windowMs) {
    return this.windows().length === 1 ? this.name : `${this.name}-${windowMs}ms`;
  }

  /** The window that decided `d`: the one whose limit is the reply's, the longest on a tie. */
  deciding(d) {
    const windows = this.windows();
    return windows.filter(([q]) => q === d.limit).sort((a, b) => b[1] - a[1])[0] ?? windows[0];
  }

  /** This limit's items of RateLimit-Policy. */
  policyItems() {
    return this.windows().map(([q, ms]) => `"${this.windowName(ms)}";q=${q};w=${ceilS(ms)}`);
  }

  /** The RateLimit item of a decision (or a part of one) under this limit. */
  currentItem(d) {
    let item = `"${this.windowName(this.deciding(d)[1])}";r=${d.remaining}`;
    if (!d.never) item += `;t=${ceilS(d.resetAfterMs)}`;
    return item;
  }
}

/**
 * The response headers for one decision (docs/clients.md, "Headers"), as [name, value] pairs:
 * X-RateLimit-Limit/-Remaining/-Reset, RateLimit-Policy and RateLimit (the IETF draft's
 * fields), and Retry-After on a refusal that waiting can cure. `limit` is the Limit the call
 * was made with; for RL.ALL, one Limit per key (in key order): RateLimit-Policy then lists
 * every limiter and RateLimit has one item per limiter, from the decision's parts.
 */
function headers(d, limit) {
  const limits = Array.isArray(limit) ? limit : [limit];
  const policy = limits.flatMap((l) => l.policyItems()).join(', ');
  let current;
  if (Array.isArray(limit)) {
    if (d.parts.length !== limits.length) {
      throw new TypeError(`${limits.length} limits for a decision of ${d.parts.length} parts`);
    }
    current = d.parts.map((p, i) => limits[i].currentItem(p)).join(', ');
  } else {
    current = limit.currentItem(d);
  }
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
 * units earlier. Bounded: at most maxKeys keys (expired ones go first, then the oldest).
 */
class RefusalCache {
  constructor(maxKeys = 100000, clock = () => performance.now()) {
    this.entries = new Map(); // key -> { deadline, cost, d, stored }
    this.maxKeys = maxKeys;
    this.clock = clock;
  }

  /** The remembered refusal of `key` for a request of `cost`, counted down; or null: ask Redis. */
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

  /** Remembers `d` when it is a refusal that waiting can cure. */
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

const clients = new WeakMap();

/**
 * The RateLimitClient for `x` (a client, a driver, or a RateLimitClient itself), one per
 * object and fallback.
 */
function clientFor(x, { fallback } = {}) {
  if (x instanceof RateLimitClient) return x;
  let byFallback = clients.get(x);
  if (!byFallback) {
    byFallback = new Map();
    clients.set(x, byFallback);
  }
  const mode = fallback || null;
  let c = byFallback.get(mode);
  if (!c) {
    c = new RateLimitClient(x, { fallback });
    byFallback.set(mode, c);
  }
  return c;
}

/** One limit applied to keys: hit, peek, refund and charge, with an optional RefusalCache. */
class Limiter {
  /**
   * @param {object|Function} redis a RateLimitClient, an ioredis or node-redis client, or a driver
   * @param {Limit} limit
   * @param {RefusalCache | null} cache
   */
  constructor(redis, limit, cache = null) {
    this.client = clientFor(redis);
    this.limit = limit;
    this.cache = cache;
  }

  async hit(key, cost = 1) {
    const cached = this.cache && this.cache.check(key, cost);
    if (cached) return cached;
    const d = await this.client.decide(this.limit.args(key, cost));
    if (this.cache) this.cache.remember(key, cost, d);
    return d;
  }

  peek(key, { replica = false } = {}) {
    return this.client.peek(key, { replica });
  }

  refund(key, cost = 1) {
    return this.client.refund(key, { cost });
  }

  charge(key, cost) {
    return this.client.charge(key, cost);
  }
}

/**
 * RL.HIT over a client or driver: one decision under a policy the server keeps, routed by the
 * subject in a cluster. `refusedBy` names the limiter that refused; `parts` holds each one's.
 */
function hit(redis, policy, subject, cost = 1) {
  return clientFor(redis).hit(policy, subject, { cost });
}

/**
 * Middleware for node's http module: one limiter call per request, its headers on every
 * response, 429 when refused, RL.LEAKY's delay waited before the handler runs. The decision
 * is `req.rateLimit`; under a policy with shadow limiters, `onShadow(name, key, req)` is told
 * which one would have refused (for a log line).
 *
 *   http.createServer(rateLimit(handler, { limiter, key: (req) => 'ip:' + req.socket.remoteAddress }))
 */
function rateLimit(handler, { limiter, key, cost = () => 1, onError = null, onShadow = null }) {
  return async (req, res) => {
    let d;
    const k = key(req);
    try {
      d = await limiter.hit(k, cost(req));
      req.rateLimit = d;
      if (onShadow && d.wouldRefuse !== null && d.wouldRefuse !== undefined) onShadow(String(d.wouldRefuse), k, req);
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

module.exports = { Limit, headers, RefusalCache, Limiter, hit, rateLimit, clientFor };
