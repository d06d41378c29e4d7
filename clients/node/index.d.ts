// Types of redis-ratelimit-client (hand-written; the code is index.js and lib/).
/// <reference types="node" />

/** The package's version, the module's. */
export declare const VERSION: string;

/** retry_after_ms of a request whose cost is above what the limiter can ever hold. */
export declare const NEVER: -1;

/** Milliseconds to whole seconds, rounded up (a wait of 0.7 s is 1 s, never 0). */
export declare function ceilS(ms: number): number;

/** The text of ModuleNotLoadedError when the module is missing. */
export declare const MODULE_NOT_LOADED: string;

/**
 * The module is not loaded on the server: raised at the first command when no fallback was
 * asked for, and, with `fallback: 'lua'`, for a command that has no Lua twin.
 */
export declare class ModuleNotLoadedError extends Error {
  constructor(message?: string);
  name: 'ModuleNotLoadedError';
}

/** A bulk reply: a string (ioredis, node-redis by default) or a Buffer. */
export type Bulk = string | Buffer;

/**
 * One decision: [allowed, limit, remaining, retry_after_ms, reset_after_ms], and what RL.ALL,
 * RL.HIT and RL.ACQUIRE add (docs/clients.md, "The typed result").
 */
export declare class Decision {
  constructor(
    allowed: boolean,
    limit: number,
    remaining: number,
    retryAfterMs: number,
    resetAfterMs: number,
    parts?: Decision[],
    leaseId?: Bulk | null,
    refusedBy?: Bulk | null,
    wouldRefuse?: Bulk | null,
    shadowed?: boolean,
  );
  /** Allowed, and recorded (unless COST 0). Refused: nothing was recorded. */
  readonly allowed: boolean;
  /** The deciding window's limit, or the bucket's size. */
  readonly limit: number;
  /** Units still available now, in the tightest window. */
  readonly remaining: number;
  /** Refused: the exact wait, or NEVER (-1). Allowed: 0, or RL.LEAKY's delay. */
  readonly retryAfterMs: number;
  /** Until the limiter is empty again (the key's PTTL). */
  readonly resetAfterMs: number;
  /** RL.ALL and RL.HIT: each limiter's own fields, in key order. */
  readonly parts: readonly Decision[];
  /** RL.ACQUIRE (or its entry in RL.ALL, RL.HIT): the lease, null when none was granted. */
  readonly leaseId: Bulk | null;
  /** RL.HIT: the name of the policy's limiter that refused, null when allowed ('PENALTY': see `banned`). */
  readonly refusedBy: Bulk | null;
  /** RL.HIT under a policy with shadow limiters: the one that would have refused, null when none would. */
  readonly wouldRefuse: Bulk | null;
  /** RL.HIT: the policy has shadow limiters (its reply tells `wouldRefuse`). */
  readonly shadowed: boolean;
  /** RL.HIT: refused by the policy's penalty box, banned for retryAfterMs more. */
  readonly banned: boolean;
  /** Refused for good: the cost is above what the limiter can ever hold. */
  readonly never: boolean;
  /** How long an allowed call must wait before acting (RL.LEAKY; 0 for the others). */
  readonly delayMs: number;
  /** Retry-After in seconds, rounded up and at least 1; null when allowed or never. */
  readonly retryAfterS: number | null;
  /** The typed reply; null for a nil (RL.PEEK, RL.REFUND, RL.CHARGE on a missing key). Throws a TypeError for another shape. */
  static fromReply(reply: unknown): Decision | null;
}

/** CL.THROTTLE's reply in redis-cell's form (whole seconds). */
export declare class Throttle {
  constructor(limited: boolean, limit: number, remaining: number, retryAfterS: number, resetAfterS: number);
  readonly limited: boolean;
  readonly limit: number;
  readonly remaining: number;
  /** Refused: seconds to wait, rounded up; -1 when allowed or never. */
  readonly retryAfterS: number;
  readonly resetAfterS: number;
  readonly allowed: boolean;
  readonly never: boolean;
  static fromReply(reply: unknown): Throttle;
}

export interface SendOptions {
  /** The key's index in the words, the one the call is routed by (1 by default; 2 for RL.ALL and RL.HIT; null for none). */
  keyIndex?: number | null;
  /** How many keys from keyIndex (RL.ALL's; 1 by default): each gets the client's keyPrefix. */
  keyCount?: number;
  /** Lets a cluster client send the command to a replica. */
  readOnly?: boolean;
}

/** Sends one command, routed by its key: the abstraction over ioredis and node-redis. */
export interface Driver {
  (words: ReadonlyArray<string | number | Buffer>, options?: SendOptions): Promise<any>;
  readonly kind: 'ioredis' | 'node-redis' | 'custom';
  readonly client: unknown;
  readonly isCluster: boolean;
  /** One driver per primary (the driver itself on a single server). */
  primaries(): Promise<Driver[]>;
  /** ioredis only: the Command for a pipeline or MULTI (`pipeline.sendCommand(send.command(words))`). */
  command?: (words: ReadonlyArray<string | number | Buffer>, options?: SendOptions) => unknown;
}

/** An ioredis Redis or Cluster, a node-redis client or cluster, a driver, or a function of yours. */
export type RedisLike = object | Driver | ((words: string[], options?: SendOptions) => Promise<any>);

/** A driver for an ioredis Redis or Cluster (routes module commands by their key, adds keyPrefix). */
export declare function fromIoredis(client: object): Driver & { command: NonNullable<Driver['command']> };
/** A driver for a node-redis client or cluster (passes the key to sendCommand, adds keyPrefix). */
export declare function fromNodeRedis(client: object): Driver;
/** The driver for a client, a driver, or a function `(words, opts) => Promise<reply>`. */
export declare function driverFor(x: RedisLike): Driver;

export interface CostOptions {
  /** The request's weight (default 1; 0 asks without taking). */
  cost?: number;
  /** Decide at this time (ms since the epoch): for tests and simulations. */
  now?: number;
}

export interface ClientOptions {
  /** Run RL.FIXED, RL.SLIDE and RL.TOKEN as Lua scripts when the module is not loaded. */
  fallback?: 'lua';
}

export interface LimiterSpec {
  key: string | Buffer;
  /** SLIDE, TOKEN, LEAKY, FIXED, SUBWIN, ACQUIRE or THROTTLE. */
  kind: string;
  /** The kind's parameters and options, e.g. [100, 60000, 'BURST', 20]. */
  params?: ReadonlyArray<string | number>;
  cost?: number;
}

export interface PolicyLimiter {
  name: string;
  kind: string;
  params?: ReadonlyArray<string | number>;
}

export interface Policy {
  name: string;
  /** FNV-1a of the definition's words, in hex: the same on every node for the same definition. */
  digest: string;
  words: string[];
}

export interface PolicyPage {
  /** '0' when done. */
  cursor: string;
  policies: Policy[];
}

export interface TopEntry {
  name: string;
  /** Refusals were at most `count`, and at least `count - error`. */
  count: number;
  error: number;
}

/** The module's commands with typed results, each one command routed by its key. */
export declare class RateLimitClient {
  constructor(redis: RedisLike, options?: ClientOptions);
  readonly send: Driver;
  readonly fallback: 'lua' | null;
  /** 'module' when loaded, 'lua' when the fallback stands in; throws ModuleNotLoadedError otherwise. Asked once per client. */
  mode(): Promise<'module' | 'lua'>;
  /** Throws ModuleNotLoadedError when the Lua twins stand in for the module. */
  moduleOnly(name: string): Promise<void>;
  /** One command of the module, raw (after the module check; the Lua twin under the fallback). */
  command(words: ReadonlyArray<string | number | Buffer>, options?: SendOptions): Promise<any>;
  /** One command whose reply is a decision. */
  decide(words: ReadonlyArray<string | number | Buffer>, options?: SendOptions): Promise<Decision | null>;

  slide(key: string | Buffer, limit: number, windowMs: number, options?: CostOptions): Promise<Decision>;
  slide(key: string | Buffer, windows: ReadonlyArray<readonly [number, number]>, options?: CostOptions): Promise<Decision>;
  token(key: string | Buffer, limit: number, windowMs: number, options?: CostOptions & { burst?: number }): Promise<Decision>;
  leaky(key: string | Buffer, limit: number, windowMs: number, options?: CostOptions & { maxDelay?: number; burst?: number }): Promise<Decision>;
  fixed(key: string | Buffer, limit: number, windowMs: number, options?: CostOptions & { align?: boolean }): Promise<Decision>;
  subwin(key: string | Buffer, limit: number, windowMs: number, resolutionMs: number, options?: CostOptions): Promise<Decision>;
  throttle(key: string | Buffer, maxBurst: number, countPerPeriod: number, periodS: number, options?: { quantity?: number | bigint; now?: number }): Promise<Throttle>;

  acquire(key: string | Buffer, limit: number, leaseMs: number, options?: CostOptions & { id?: string | Buffer; block?: number }): Promise<Decision>;
  release(key: string | Buffer, leaseId: Bulk, options?: { now?: number }): Promise<Decision>;
  extend(key: string | Buffer, leaseId: Bulk, leaseMs: number, options?: { now?: number }): Promise<Decision>;

  peek(key: string | Buffer, options?: CostOptions & { replica?: boolean }): Promise<Decision | null>;
  refund(key: string | Buffer, options?: CostOptions): Promise<Decision | null>;
  charge(key: string | Buffer, cost: number, options?: { now?: number }): Promise<Decision | null>;

  all(limiters: ReadonlyArray<LimiterSpec>, options?: { now?: number }): Promise<Decision>;
  hit(policy: string, subject: string | Buffer, options?: CostOptions): Promise<Decision>;

  /** RL.POLICY SET on every primary. */
  policySet(name: string, limiters: ReadonlyArray<PolicyLimiter> | ReadonlyArray<string | number>): Promise<void>;
  policyGet(name: string): Promise<string[] | null>;
  /** RL.POLICY DEL on every primary: whether any held it. */
  policyDel(name: string): Promise<boolean>;
  policyPage(cursor?: string, options?: { count?: number; node?: Driver }): Promise<PolicyPage>;
  /** Every policy, page by page (in a cluster, one node's). */
  policies(options?: { count?: number; node?: Driver }): AsyncGenerator<Policy, void, undefined>;
  /** RL.TOP; in a cluster the primaries' entries added up by name. */
  top(options?: { count?: number; policy?: string }): Promise<TopEntry[]>;
  /** A command without a key, on every primary. */
  onPrimaries(words: ReadonlyArray<string | number | Buffer>): Promise<any[]>;
}

/** A limiter's configuration: its command and the parameters after the key. */
export declare class Limit {
  constructor(command: string, params: ReadonlyArray<string | number>, name?: string);
  readonly command: string;
  readonly params: string[];
  readonly name: string;
  args(key: string | Buffer, cost?: number): Array<string | Buffer>;
  /** The [quota, windowMs] pairs this call enforces. */
  windows(): Array<[number, number]>;
  windowName(windowMs: number): string;
  deciding(d: Decision): [number, number];
  policyItems(): string[];
  currentItem(d: Decision): string;
}

/**
 * The response headers of one decision, as [name, value] pairs (docs/clients.md, "Headers");
 * for RL.ALL, one Limit per key.
 */
export declare function headers(d: Decision, limit: Limit | ReadonlyArray<Limit>): Array<[string, string]>;

/** Refusals remembered per key until they expire: refused again locally, without a round trip. */
export declare class RefusalCache {
  constructor(maxKeys?: number, clock?: () => number);
  check(key: string, cost: number): Decision | null;
  remember(key: string, cost: number, d: Decision): void;
  readonly size: number;
}

/** One Limit applied to keys. */
export declare class Limiter {
  constructor(redis: RedisLike | RateLimitClient, limit: Limit, cache?: RefusalCache | null);
  readonly client: RateLimitClient;
  readonly limit: Limit;
  readonly cache: RefusalCache | null;
  hit(key: string, cost?: number): Promise<Decision>;
  peek(key: string, options?: { replica?: boolean }): Promise<Decision | null>;
  refund(key: string, cost?: number): Promise<Decision | null>;
  charge(key: string, cost: number): Promise<Decision | null>;
}

/** RL.HIT over a client or driver, routed by the subject. */
export declare function hit(redis: RedisLike | RateLimitClient, policy: string, subject: string | Buffer, cost?: number): Promise<Decision>;

/** Middleware for node's http module: headers on every response, 429 when refused. */
export declare function rateLimit<Req extends import('node:http').IncomingMessage, Res extends import('node:http').ServerResponse>(
  handler: (req: Req, res: Res) => unknown,
  options: {
    limiter: Limiter;
    key: (req: Req) => string;
    cost?: (req: Req) => number;
    onError?: ((err: unknown, req: Req, res: Res, handler: (req: Req, res: Res) => unknown) => unknown) | null;
  },
): (req: Req, res: Res) => Promise<unknown>;

/** What RateLimitStore answers express-rate-limit (its ClientRateLimitInfo). */
export interface StoreInfo {
  totalHits: number;
  resetTime: Date | undefined;
}

export interface RateLimitStoreOptions {
  /** A RateLimitClient, an ioredis Redis or Cluster, a node-redis client or cluster, or a driver. */
  client: RedisLike | RateLimitClient;
  /** Prepended to every key (default 'rl:'). */
  prefix?: string;
  /** Run RL.FIXED as its Lua twin when the module is missing (increment and resetKey only). */
  fallback?: 'lua';
}

/** A Store of express-rate-limit 8.x on the module (RL.FIXED, RL.REFUND, RL.PEEK, DEL). */
export declare class RateLimitStore {
  constructor(options: RateLimitStoreOptions);
  readonly client: RateLimitClient;
  prefix: string;
  localKeys: boolean;
  windowMs: number;
  init(options: { windowMs: number }): void;
  increment(key: string): Promise<StoreInfo>;
  decrement(key: string): Promise<void>;
  get(key: string): Promise<StoreInfo | undefined>;
  resetKey(key: string): Promise<void>;
}
