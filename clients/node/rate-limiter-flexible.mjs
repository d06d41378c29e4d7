import cjs from './rate-limiter-flexible.js';

export const { RateLimiterModule, COUNT_ALL } = cjs;
export default cjs;
