// `node:buffer`: `Buffer` (a Uint8Array with Node's basic methods; also a global).
import { Buffer } from "suzumio:runtime";

const constants = { MAX_LENGTH: 2 ** 32 - 1 };
export { Buffer, constants };
export default { Buffer, constants };
