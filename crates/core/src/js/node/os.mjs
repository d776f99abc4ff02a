// `node:os`: the few facts packs ask for. Everything runs on Linux.
const EOL = "\n";
const tmpdir = () => "/tmp";
const platform = () => "linux";
const type = () => "Linux";
const arch = () => "x64";
const homedir = () => "/tmp";
const endianness = () => "LE";
export { EOL, tmpdir, platform, type, arch, homedir, endianness };
export default { EOL, tmpdir, platform, type, arch, homedir, endianness };
