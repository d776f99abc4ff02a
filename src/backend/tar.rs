//! A minimal in-memory ustar writer: directories, regular files and symlinks, owned by root, with
//! a fixed mtime so the same inputs give the same bytes. Enough to hand a rootfs to the engine's
//! import endpoint; it reads nothing from disk and supports only names of up to 100 bytes.

/// A fixed modification time (2024-01-01) so a rebuilt rootfs is byte-identical.
const MTIME: u64 = 1_704_067_200;
const BLOCK: usize = 512;

#[derive(Default)]
pub(crate) struct TarWriter {
    buf: Vec<u8>,
}

impl TarWriter {
    pub(crate) fn dir(&mut self, name: &str, mode: u32) {
        let name = if name.ends_with('/') { name.to_string() } else { format!("{name}/") };
        self.header(&name, mode, 0, b'5', "");
    }

    pub(crate) fn file(&mut self, name: &str, mode: u32, data: &[u8]) {
        self.header(name, mode, data.len() as u64, b'0', "");
        self.buf.extend_from_slice(data);
        let pad = (BLOCK - data.len() % BLOCK) % BLOCK;
        self.buf.resize(self.buf.len() + pad, 0);
    }

    pub(crate) fn symlink(&mut self, name: &str, target: &str) {
        self.header(name, 0o777, 0, b'2', target);
    }

    /// The archive, closed with the two zero blocks the format requires.
    pub(crate) fn finish(mut self) -> Vec<u8> {
        self.buf.resize(self.buf.len() + 2 * BLOCK, 0);
        self.buf
    }

    fn header(&mut self, name: &str, mode: u32, size: u64, kind: u8, link: &str) {
        // Every name and link target here is a constant of the rootfs recipe: a longer one is a
        // bug in the recipe, not an input error.
        assert!(name.len() <= 100 && link.len() <= 100, "tar name too long for ustar: {name}");
        let mut h = [0u8; BLOCK];
        h[..name.len()].copy_from_slice(name.as_bytes());
        octal(&mut h[100..108], u64::from(mode));
        octal(&mut h[108..116], 0); // uid
        octal(&mut h[116..124], 0); // gid
        octal(&mut h[124..136], size);
        octal(&mut h[136..148], MTIME);
        h[156] = kind;
        h[157..157 + link.len()].copy_from_slice(link.as_bytes());
        h[257..263].copy_from_slice(b"ustar\0");
        h[263..265].copy_from_slice(b"00");
        h[265..269].copy_from_slice(b"root");
        h[297..301].copy_from_slice(b"root");
        // The checksum is computed with its own field read as spaces, then stored as six octal
        // digits, a NUL and a space.
        h[148..156].copy_from_slice(b"        ");
        let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
        let text = format!("{sum:06o}\0 ");
        h[148..156].copy_from_slice(text.as_bytes());
        self.buf.extend_from_slice(&h);
    }
}

/// Zero-padded octal, NUL-terminated, filling `field`.
fn octal(field: &mut [u8], value: u64) {
    let width = field.len() - 1;
    let text = format!("{value:0width$o}");
    field[..width].copy_from_slice(&text.as_bytes()[text.len() - width..]);
    field[width] = 0;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(h: &[u8], range: std::ops::Range<usize>) -> String {
        String::from_utf8_lossy(&h[range]).trim_end_matches('\0').to_string()
    }

    #[test]
    fn header_fields_and_checksum() {
        let mut t = TarWriter::default();
        t.file("etc/passwd", 0o644, b"root:x:0:0\n");
        t.symlink("bin/sh", "busybox");
        let bytes = t.finish();
        // file header + one data block + symlink header + two end blocks
        assert_eq!(bytes.len(), 5 * BLOCK);
        let h = &bytes[..BLOCK];
        assert_eq!(field(h, 0..100), "etc/passwd");
        assert_eq!(field(h, 100..108), "0000644");
        assert_eq!(field(h, 124..136), "00000000013");
        let stored = u32::from_str_radix(field(h, 148..154).as_str(), 8).unwrap();
        let mut copy = h.to_vec();
        copy[148..156].copy_from_slice(b"        ");
        assert_eq!(stored, copy.iter().map(|&b| u32::from(b)).sum::<u32>());
        let link = &bytes[2 * BLOCK..3 * BLOCK];
        assert_eq!(link[156], b'2');
        assert_eq!(field(link, 157..257), "busybox");
        assert!(bytes[3 * BLOCK..].iter().all(|&b| b == 0));
    }
}
