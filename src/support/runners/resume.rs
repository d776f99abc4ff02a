//! Resume tokens: each accepted hello gets a fresh one, kept by the controller in
//! `.suzumio/run/<agent>.resume` (mode 0600, outside the directory mounted into the container),
//! so that a runner outliving its controller can take up its session with the next one.

use std::path::Path;

/// A fresh resume token, written to `path` (mode 0600, replacing the previous one atomically).
pub(super) fn write_resume_token(path: &Path) -> std::io::Result<String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let token = crate::store::new_token();
    let temp = path.with_extension(format!("tmp-{}", uuid::Uuid::new_v4().simple()));
    let written = (|| {
        let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&temp)?;
        file.write_all(token.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&temp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written.map(|()| token)
}
