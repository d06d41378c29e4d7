// Types of redis-ratelimit-client/express-rate-limit.
export { RateLimitStore, RateLimitStoreOptions, StoreInfo } from './index';
/** The limit RateLimitStore gives RL.FIXED: the largest (the count is 32-bit), so it counts every hit. */
export declare const COUNT_ALL: 4294967295;
