//! The embedded WebUI (reference §8, issue [F]): plain HTML/CSS/JS ES modules under
//! `src/web/ui/`, compiled into the binary so the UI works offline with no build step.
//!
//! Serves `GET /` (the page) and `GET /ui/<file>` (its assets) with their content type and
//! `Cache-Control: no-cache`; anything else under `/ui/` is the API's JSON 404. It owns no API
//! route and reads no state: the page talks to the API like any other client.

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::{ApiError, AppState};

/// One embedded file, by its path under `src/web/ui/`.
struct Asset {
    path: &'static str,
    body: &'static [u8],
}

macro_rules! embed {
    ($($path:literal),* $(,)?) => {
        &[$(Asset { path: $path, body: include_bytes!(concat!("ui/", $path)) }),*]
    };
}

/// Every file of the WebUI. A test checks this list against the directory, so a new file
/// cannot be forgotten here.
static ASSETS: &[Asset] = embed![
    "index.html",
    "styles.css",
    "favicon.svg",
    "app.js",
    "api.js",
    "dom.js",
    "forms.js",
    "views/overview.js",
    "views/overview/hero.js",
    "views/overview/counters.js",
    "views/overview/roster.js",
    "views/overview/composer.js",
    "views/overview/budget.js",
    "views/overview/activity.js",
    "views/overview/graph.js",
    "views/messages.js",
    "views/activations.js",
    "views/activations/timeline.js",
    "views/events.js",
    "views/history.js",
    "views/tool-content.js",
    "views/commands.js",
    "views/tools.js",
    "views/tools/catalog.js",
    "views/tools/tool-index.js",
    "views/tools/tool-page.js",
    "views/tools/control-card.js",
    "views/tools/switches.js",
    "views/approvals.js",
    "views/audit.js",
];

/// The page may load only its own assets and talk only to its own origin: no CDN, no inline
/// script, and no framing by another site.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
     connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

pub fn routes() -> Router<AppState> {
    Router::new().route("/", get(index)).route("/ui/{*path}", get(asset))
}

async fn index() -> Response {
    serve("index.html")
}

async fn asset(Path(path): Path<String>) -> Response {
    serve(&path)
}

fn find(path: &str) -> Option<&'static Asset> {
    ASSETS.iter().find(|a| a.path == path)
}

fn content_type(path: &str) -> Option<&'static str> {
    let ext = path.rsplit_once('.')?.1;
    Some(match ext {
        "html" => "text/html; charset=utf-8",
        "js" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "svg" => "image/svg+xml",
        "json" => "application/json",
        "png" => "image/png",
        _ => return None,
    })
}

fn serve(path: &str) -> Response {
    let (Some(asset), Some(content_type)) = (find(path), content_type(path)) else {
        return ApiError::NotFound(format!("no such WebUI asset: /ui/{path}")).into_response();
    };
    let mut response = (StatusCode::OK, asset.body).into_response();
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_TYPE, content_type),
        (header::CACHE_CONTROL, "no-cache"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        (header::REFERRER_POLICY, "no-referrer"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::{Path, PathBuf};

    use super::*;

    fn ui_dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("src/web/ui")
    }

    fn files_under(dir: &Path, prefix: &str, out: &mut BTreeSet<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let name = format!("{prefix}{}", entry.file_name().to_string_lossy());
            if entry.file_type().unwrap().is_dir() {
                files_under(&entry.path(), &format!("{name}/"), out);
            } else {
                out.insert(name);
            }
        }
    }

    fn text(path: &str) -> &'static str {
        std::str::from_utf8(find(path).unwrap().body).unwrap()
    }

    /// The relative module paths a JS file imports, resolved against its own directory.
    fn imports(path: &str) -> Vec<String> {
        let dir = path.rsplit_once('/').map_or("", |(d, _)| d);
        let source = text(path);
        let mut out = Vec::new();
        for marker in ["from \"", "import(\""] {
            for (i, _) in source.match_indices(marker) {
                let rest = &source[i + marker.len()..];
                let spec = &rest[..rest.find('"').unwrap()];
                let mut parts: Vec<&str> = if dir.is_empty() { Vec::new() } else { dir.split('/').collect() };
                for seg in spec.split('/') {
                    match seg {
                        "." => {}
                        ".." => {
                            parts.pop();
                        }
                        s => parts.push(s),
                    }
                }
                out.push(parts.join("/"));
            }
        }
        out
    }

    #[test]
    fn every_file_in_the_ui_directory_is_embedded() {
        let mut on_disk = BTreeSet::new();
        files_under(&ui_dir(), "", &mut on_disk);
        let embedded: BTreeSet<String> = ASSETS.iter().map(|a| a.path.to_string()).collect();
        assert_eq!(on_disk, embedded);
    }

    #[test]
    fn every_asset_has_a_content_type() {
        for asset in ASSETS {
            assert!(content_type(asset.path).is_some(), "{} has no content type", asset.path);
        }
    }

    #[test]
    fn every_module_import_resolves_to_an_embedded_asset() {
        let page = text("index.html");
        assert!(page.contains("src=\"/ui/app.js\""), "index.html must load /ui/app.js");
        for asset in ASSETS.iter().filter(|a| a.path.ends_with(".js")) {
            for target in imports(asset.path) {
                assert!(find(&target).is_some(), "{} imports {target}, which is not embedded", asset.path);
            }
        }
    }

    #[test]
    fn no_asset_loads_anything_from_another_origin() {
        for asset in ASSETS {
            let body = String::from_utf8_lossy(asset.body).replace("http://www.w3.org/", "");
            for needle in ["http://", "https://", "//cdn", "@import url("] {
                assert!(!body.contains(needle), "{} mentions {needle}", asset.path);
            }
        }
    }

    #[test]
    fn assets_are_served_with_their_type_and_no_cache() {
        for (path, expected) in [
            ("index.html", "text/html; charset=utf-8"),
            ("views/tools.js", "text/javascript; charset=utf-8"),
            ("styles.css", "text/css; charset=utf-8"),
        ] {
            let response = serve(path);
            assert_eq!(response.status(), StatusCode::OK, "{path}");
            assert_eq!(response.headers()[header::CONTENT_TYPE], expected, "{path}");
            assert_eq!(response.headers()[header::CACHE_CONTROL], "no-cache", "{path}");
        }
    }

    #[test]
    fn unknown_and_traversing_paths_are_404() {
        for path in ["nope.js", "../mod.rs", "views/../../api.rs", "", "views/"] {
            assert_eq!(serve(path).status(), StatusCode::NOT_FOUND, "{path}");
        }
    }
}
