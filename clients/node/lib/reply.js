'use strict';
// Typed replies: the five-field decision every RL.* limiter answers (docs/commands.md, "The
// reply"), RL.ALL's and RL.HIT's parts, CL.THROTTLE's redis-cell form, RL.POLICY LIST's pages
// and RL.TOP's entries. Parsing is strict: a reply of another shape raises a TypeError, so a
// reply from another command never passes for a decision.

/** retry_after_ms of a request whose cost is above what the limiter can ever hold. */
const NEVER = -1;

/** Milliseconds to whole seconds, rounded up (a wait of 0.7 s is 1 s, never 0). */
const ceilS = (ms) => Math.ceil(ms / 1000);

const isInt = (x) => typeof x === 'number' && Number.isInteger(x);

/** A reply integer as a number (ioredis and node-redis answer numbers; strings are accepted). */
function int(x, reply, what) {
  if (isInt(x)) return x;
  if (typeof x === 'string' && /^-?\d+$/.test(x)) return Number(x);
  if (typeof x === 'bigint') return Number(x);
  throw new TypeError(`not ${what}: ${show(reply)}`);
}

function show(reply) {
  try {
    return JSON.stringify(reply, (_k, v) => (typeof v === 'bigint' ? String(v) : v));
  } catch {
    return String(reply);
  }
}

const isBulk = (x) => typeof x === 'string' || Buffer.isBuffer(x);

/**
 * One decision: the reply of RL.SLIDE, RL.TOKEN, RL.LEAKY, RL.FIXED, RL.SUBWIN, RL.ACQUIRE,
 * RL.RELEASE, RL.EXTEND, RL.PEEK, RL.REFUND, RL.CHARGE, RL.ALL or RL.HIT:
 * [allowed, limit, remaining, retry_after_ms, reset_after_ms], then what some commands add.
 */
class Decision {
  /**
   * @param {boolean} allowed
   * @param {number} limit the deciding window's limit, or the bucket's size
   * @param {number} remaining units available now, in the tightest window
   * @param {number} retryAfterMs refused: exact wait, or NEVER; allowed: 0, or RL.LEAKY's delay
   * @param {number} resetAfterMs until the limiter is empty again (the key's PTTL)
   * @param {Decision[]} parts RL.ALL and RL.HIT: each limiter's own fields, in key order
   * @param {string|Buffer|null} leaseId RL.ACQUIRE, or its entry in RL.ALL: the lease (null if refused)
   * @param {string|Buffer|null} refusedBy RL.HIT: the policy's limiter that refused (null if
   *   allowed; 'PENALTY' when the policy's penalty box refused: see `banned`)
   * @param {string|Buffer|null} wouldRefuse RL.HIT under a policy with shadow limiters: the one
   *   that would have refused (null if none would): log it while a new limit is tried
   * @param {boolean} shadowed RL.HIT: the policy has shadow limiters (the reply ends with `wouldRefuse`)
   */
  constructor(
    allowed,
    limit,
    remaining,
    retryAfterMs,
    resetAfterMs,
    parts = [],
    leaseId = null,
    refusedBy = null,
    wouldRefuse = null,
    shadowed = false,
  ) {
    Object.assign(this, {
      allowed,
      limit,
      remaining,
      retryAfterMs,
      resetAfterMs,
      parts,
      leaseId,
      refusedBy,
      wouldRefuse,
      shadowed,
    });
    Object.freeze(this);
  }

  /**
   * The typed reply; null for the nil of RL.PEEK, RL.REFUND and RL.CHARGE on a missing key.
   * Five integers; a sixth field, RL.ACQUIRE's lease id (nil when refused); RL.ALL's five, then
   * one array per key (five fields, six for an ACQUIRE limiter); RL.HIT's five, the refusing
   * limiter's name (nil when allowed), then one array per limiter.
   */
  static fromReply(reply) {
    if (reply === null || reply === undefined) return null;
    const bad = (what) => new TypeError(`not ${what}: ${show(reply)}`);
    if (!Array.isArray(reply) || reply.length < 5) throw bad('a five-field rate limiter reply');
    const head = reply.slice(0, 5);
    let rest = reply.slice(5);
    if (head.some((x) => Array.isArray(x))) throw bad('a five-field rate limiter reply');
    const [allowed, limit, remaining, retry, reset] = head.map((x) => int(x, reply, 'a five-field rate limiter reply'));
    let refusedBy = null;
    let wouldRefuse = null;
    let shadowed = false;
    if (rest.length >= 2 && !Array.isArray(rest[0])) {
      // RL.HIT: the refusing limiter's name (nil when allowed), then each limiter's fields,
      // then, under shadow limiters, the one that would have refused (not an array).
      if (rest[0] !== null && !isBulk(rest[0])) throw bad('an RL.HIT reply');
      refusedBy = rest[0];
      rest = rest.slice(1);
      const last = rest[rest.length - 1];
      if (rest.length >= 2 && !Array.isArray(last)) {
        if (last !== null && !isBulk(last)) throw bad('an RL.HIT reply');
        wouldRefuse = last;
        shadowed = true;
        rest = rest.slice(0, -1);
      }
    }
    let leaseId = null;
    if (rest.length === 1 && !Array.isArray(rest[0])) {
      // RL.ACQUIRE's sixth field: the lease id (nil when refused).
      if (rest[0] !== null && !isBulk(rest[0])) throw bad('an RL.ACQUIRE reply');
      leaseId = rest[0];
      rest = [];
    }
    if (rest.some((x) => !Array.isArray(x) || (x.length !== 5 && x.length !== 6))) {
      throw bad('an RL.ALL reply');
    }
    const parts = rest.map((x) => Decision.fromReply(x));
    return new Decision(allowed === 1, limit, remaining, retry, reset, parts, leaseId, refusedBy, wouldRefuse, shadowed);
  }

  /** RL.HIT: refused by the policy's penalty box; banned for retryAfterMs more. */
  get banned() {
    return !this.allowed && this.refusedBy !== null && String(this.refusedBy) === 'PENALTY';
  }

  /** Refused for good: the cost is above the limit, waiting does not help. */
  get never() {
    return !this.allowed && this.retryAfterMs === NEVER;
  }

  /** How long an allowed call must wait before acting (RL.LEAKY; 0 for the others). */
  get delayMs() {
    return this.allowed ? this.retryAfterMs : 0;
  }

  /** Retry-After in seconds, rounded up and at least 1; null when allowed or never. */
  get retryAfterS() {
    if (this.allowed || this.never) return null;
    return Math.max(1, ceilS(this.retryAfterMs));
  }
}

/**
 * CL.THROTTLE's reply, redis-cell's form: [limited, limit, remaining, retry_after_s,
 * reset_after_s], whole seconds rounded up (docs/commands.md, CL.THROTTLE).
 */
class Throttle {
  constructor(limited, limit, remaining, retryAfterS, resetAfterS) {
    Object.assign(this, { limited, limit, remaining, retryAfterS, resetAfterS });
    Object.freeze(this);
  }

  static fromReply(reply) {
    if (!Array.isArray(reply) || reply.length !== 5) throw new TypeError(`not a CL.THROTTLE reply: ${show(reply)}`);
    const [limited, limit, remaining, retry, reset] = reply.map((x) => int(x, reply, 'a CL.THROTTLE reply'));
    return new Throttle(limited === 1, limit, remaining, retry, reset);
  }

  get allowed() {
    return !this.limited;
  }

  /** Refused for good: the quantity exceeds what the bucket holds. */
  get never() {
    return this.limited && this.retryAfterS === -1;
  }
}

/** One page of RL.POLICY LIST: [next_cursor, [[name, digest, [words...]], ...]]. */
function policyPage(reply) {
  const bad = () => new TypeError(`not an RL.POLICY LIST reply: ${show(reply)}`);
  if (!Array.isArray(reply) || reply.length !== 2 || !isBulk(reply[0]) || !Array.isArray(reply[1])) throw bad();
  const policies = reply[1].map((p) => {
    if (!Array.isArray(p) || p.length !== 3 || !isBulk(p[0]) || !isBulk(p[1]) || !Array.isArray(p[2])) throw bad();
    return { name: String(p[0]), digest: String(p[1]), words: p[2].map(String) };
  });
  return { cursor: String(reply[0]), policies };
}

/** RL.TOP's entries: [[name, count, error], ...]. */
function topEntries(reply) {
  const bad = () => new TypeError(`not an RL.TOP reply: ${show(reply)}`);
  if (!Array.isArray(reply)) throw bad();
  return reply.map((e) => {
    if (!Array.isArray(e) || e.length !== 3 || !isBulk(e[0])) throw bad();
    return { name: String(e[0]), count: int(e[1], reply, 'an RL.TOP reply'), error: int(e[2], reply, 'an RL.TOP reply') };
  });
}

module.exports = { NEVER, ceilS, Decision, Throttle, policyPage, topEntries };
