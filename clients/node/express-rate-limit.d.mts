export * from './express-rate-limit.js';
import * as all from './express-rate-limit.js';
export default all;
