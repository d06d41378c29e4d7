// Types of the ES module entry (index.mjs): the same as the CommonJS one's.
export * from './index.js';
import * as all from './index.js';
export default all;
