export * from './rate-limiter-flexible.js';
import * as all from './rate-limiter-flexible.js';
export default all;
