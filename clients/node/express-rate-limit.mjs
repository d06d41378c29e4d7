import cjs from './express-rate-limit.js';

export const { RateLimitStore, COUNT_ALL } = cjs;
export default cjs;
