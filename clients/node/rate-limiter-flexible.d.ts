// Types of redis-ratelimit-client/rate-limiter-flexible (needs rate-limiter-flexible 11.x).
import { RateLimiterStoreAbstract } from 'rate-limiter-flexible';

/** RateLimiterRedis's options, and the fallback. */
export interface RateLimiterModuleOptions {
  /** An ioredis Redis or Cluster, or a node-redis client or cluster. */
  storeClient: any;
  points: number;
  /** Seconds, whole (floored, as RateLimiterRedis does), 1 to 2678400 (31 days): 0 ("never expires") is not available. */
  duration: number;
  blockDuration?: number;
  keyPrefix?: string;
  execEvenly?: boolean;
  execEvenlyMinDelayMs?: number;
  inMemoryBlockOnConsumed?: number;
  inMemoryBlockDuration?: number;
  blockOnConsumed?: number;
  insuranceLimiter?: any;
  rejectIfRedisNotReady?: boolean;
  /** Run RL.FIXED as its Lua twin when the module is missing (consume and penalty only). */
  fallback?: 'lua';
}

/** A rate-limiter-flexible limiter on the module: each operation one command. */
export declare class RateLimiterModule extends RateLimiterStoreAbstract {
  constructor(opts: RateLimiterModuleOptions);
}

/** The limit RateLimiterModule gives RL.FIXED: the largest, so refused consumes count too. */
export declare const COUNT_ALL: 4294967295;
