//! The controller's layer order is a rule, not a comment: every `crate::…` path in `src/`
//! (`use` lines, grouped `use crate::{a, b}` lists and paths written inline) must name a module
//! on a lower line of the order written in ARCHITECTURE.md (the ```layers block). Modules on
//! the same line must not import each other. The core's modules (`config`, `toolpack`, `js`,
//! `rpc`, `text`, `fsat`, `hosts`, `disk`) are another crate, below all of them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The layers, top first, as ARCHITECTURE.md writes them.
fn layer_order(root: &Path) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let start = text.find("```layers\n").expect("ARCHITECTURE.md has a ```layers block");
    let block = &text[start + "```layers\n".len()..];
    let block = &block[..block.find("```").expect("the ```layers block ends")];
    block
        .lines()
        .map(|l| l.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        .filter(|l| !l.is_empty())
        .collect()
}

const CORE: &[&str] = &["config", "toolpack", "js", "rpc", "text", "fsat", "hosts", "disk", "VERSION"];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file of `src/` belongs to (`src/calls/mod.rs` → `calls`).
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).expect("under src");
    let first = rel.components().next().expect("a component").as_os_str().to_string_lossy().to_string();
    first.trim_end_matches(".rs").to_string()
}

/// The file without comments: line comments (not inside a string that starts before them on
/// the line, approximately: `//` preceded by `:` is a URL) and block comments.
fn code_of(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("/*") {
        out.push_str(&rest[..i]);
        rest = rest[i..].find("*/").map_or("", |j| &rest[i + j + 2..]);
    }
    out.push_str(rest);
    out.lines()
        .map(|line| {
            let mut cut = line.len();
            let mut from = 0;
            while let Some(i) = line[from..].find("//") {
                let at = from + i;
                if at == 0 || !line[..at].ends_with(':') {
                    cut = at;
                    break;
                }
                from = at + 2;
            }
            &line[..cut]
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every top-level module a piece of code names through `crate::`.
fn imports(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        let after = &rest[i + "crate::".len()..];
        if let Some(group) = after.strip_prefix('{') {
            // `crate::{a, b::{c, d}, e}`: the first segment of every item at depth 0.
            let (mut depth, mut item, mut end) = (0usize, String::new(), group.len());
            let mut items = Vec::new();
            for (j, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        end = j;
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => items.push(std::mem::take(&mut item)),
                    _ if depth == 0 => item.push(c),
                    _ => {}
                }
            }
            items.push(item);
            for item in items {
                let first: String = item.trim().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                if !first.is_empty() {
                    found.push(first);
                }
            }
            rest = &group[end..];
        } else {
            let name: String = after.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if !name.is_empty() {
                found.push(name);
            }
            rest = after;
        }
    }
    found
}

#[test]
fn no_module_of_src_imports_a_higher_layer() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let layers = layer_order(root);
    let rank: BTreeMap<&str, usize> =
        layers.iter().enumerate().flat_map(|(i, line)| line.iter().map(move |m| (m.as_str(), i))).collect();
    let src = root.join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut problems = Vec::new();
    let mut seen_modules = std::collections::BTreeSet::new();
    for file in &files {
        let module = module_of(&src, file);
        if module == "main" || module == "lib" {
            continue;
        }
        seen_modules.insert(module.clone());
        let Some(&mine) = rank.get(module.as_str()) else {
            problems.push(format!("{}: module `{module}` is not in ARCHITECTURE.md's layers", file.display()));
            continue;
        };
        let code = code_of(&std::fs::read_to_string(file).expect("read"));
        let mut per_target: BTreeMap<String, usize> = BTreeMap::new();
        for target in imports(&code) {
            if target == module || CORE.contains(&target.as_str()) {
                continue;
            }
            *per_target.entry(target).or_default() += 1;
        }
        for (target, count) in per_target {
            match rank.get(target.as_str()) {
                None => problems.push(format!("{}: imports `{target}`, which is not in the layers", file.display())),
                Some(&theirs) if theirs <= mine => problems.push(format!(
                    "{}: `{module}` imports `{target}` ({count}×), which is {} in the layer order",
                    file.strip_prefix(root).unwrap_or(file).display(),
                    if theirs == mine { "on the same line" } else { "higher" }
                )),
                Some(_) => {}
            }
        }
    }
    for line in &layers {
        for m in line {
            if !seen_modules.contains(m) {
                problems.push(format!("ARCHITECTURE.md's layers name `{m}`, which is no module of src/"));
            }
        }
    }
    assert!(problems.is_empty(), "imports against the layer order:\n{}", problems.join("\n"));
}

#[test]
fn the_import_reader_sees_every_form() {
    let code = code_of(
        "use crate::store::Store;\nuse crate::{web, calls::{a, b}, support::X};\n// use crate::commented;\nlet x = crate::inline::f(); // crate::trailing\n/* crate::block */",
    );
    assert_eq!(imports(&code), ["store", "web", "calls", "support", "inline"]);
}
