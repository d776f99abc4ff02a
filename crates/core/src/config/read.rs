//! Typed reading of located nodes: "this key is a string", "that one a positive integer", with
//! every mismatch recorded (with location and key path) instead of returned.
//!
//! The section validators (`validate/`) and the toolpack manifest parser are written with these helpers
//! so that unknown keys, wrong types and missing required keys read the same everywhere.

use crate::config::diag::{Diagnostics, did_you_mean};
use crate::config::node::{Key, Loc, Node, Value};

/// Unknown keys listed one by one per mapping; past this, one line says how many more there are
/// (a generated file with 40 000 stray keys gets a readable report, fast).
const MAX_UNKNOWN_REPORTED: usize = 50;

/// A mapping being read, with the key path that leads to it.
pub struct Obj<'a> {
    pub node: &'a Node,
    pub path: String,
}

/// Keys that used to exist (in the reference or older docs) and what to say about them.
pub type Retired = &'static [(&'static str, &'static str)];

pub fn join(path: &str, key: &str) -> String {
    if path.is_empty() { key.to_string() } else { format!("{path}.{key}") }
}

pub fn index(path: &str, i: usize) -> String {
    format!("{path}[{i}]")
}

impl<'a> Obj<'a> {
    /// Open `node` as a mapping whose allowed keys are `known`. Reports a non-mapping and every
    /// unknown key (with a "did you mean" hint). A null node reads as an empty mapping.
    pub fn open(node: &'a Node, path: &str, known: &[&str], retired: Retired, d: &mut Diagnostics) -> Option<Obj<'a>> {
        match &node.value {
            Value::Map(entries) => {
                let mut unknown = 0;
                for (key, _) in entries {
                    if known.contains(&key.name.as_str()) {
                        continue;
                    }
                    unknown += 1;
                    if unknown > MAX_UNKNOWN_REPORTED {
                        continue;
                    }
                    let hint = retired
                        .iter()
                        .find(|(name, _)| *name == key.name)
                        .map(|(_, why)| why.to_string())
                        .or_else(|| did_you_mean(&key.name, known.iter().copied()))
                        .or_else(|| Some(format!("known keys: {}", known.join(", "))));
                    d.error_hint(Some(&key.loc), join(path, &key.name), "unknown key", hint);
                }
                if unknown > MAX_UNKNOWN_REPORTED {
                    let more = unknown - MAX_UNKNOWN_REPORTED;
                    d.error(Some(&node.loc), path, format!("{more} more unknown keys in this mapping are not listed"));
                }
                Some(Obj { node, path: path.to_string() })
            }
            Value::Null => Some(Obj { node, path: path.to_string() }),
            _ => {
                d.error(Some(&node.loc), path, format!("expected a mapping, got {}", node.kind_name()));
                None
            }
        }
    }

    pub fn get(&self, key: &str) -> Option<&'a Node> {
        self.node.get(key).filter(|n| n.value != Value::Null)
    }

    pub fn key_loc(&self, key: &str) -> Loc {
        self.node
            .as_map()
            .and_then(|m| m.iter().find(|(k, _)| k.name == key))
            .map_or_else(|| self.node.loc.clone(), |(k, _)| k.loc.clone())
    }

    pub fn entries(&self) -> &'a [(Key, Node)] {
        self.node.as_map().unwrap_or(&[])
    }

    pub fn path_of(&self, key: &str) -> String {
        join(&self.path, key)
    }

    pub fn missing(&self, key: &str, d: &mut Diagnostics) {
        d.error(Some(&self.node.loc), self.path_of(key), "is required");
    }

    pub fn string(&self, key: &str, d: &mut Diagnostics) -> Option<String> {
        let node = self.get(key)?;
        expect_string(node, &self.path_of(key), d)
    }

    pub fn req_string(&self, key: &str, d: &mut Diagnostics) -> Option<String> {
        if self.get(key).is_none() {
            self.missing(key, d);
            return None;
        }
        self.string(key, d)
    }

    pub fn bool(&self, key: &str, d: &mut Diagnostics) -> Option<bool> {
        let node = self.get(key)?;
        match node.value {
            Value::Bool(b) => Some(b),
            _ => {
                d.error(
                    Some(&node.loc),
                    self.path_of(key),
                    format!("expected true or false, got {}", node.kind_name()),
                );
                None
            }
        }
    }

    /// An integer ≥ `min`.
    pub fn int_at_least(&self, key: &str, min: i64, d: &mut Diagnostics) -> Option<i64> {
        let node = self.get(key)?;
        match node.value {
            Value::Int(i) if i >= min => Some(i),
            Value::Int(i) => {
                let what = if min == 1 { "a positive integer".to_string() } else { format!("an integer ≥ {min}") };
                d.error(Some(&node.loc), self.path_of(key), format!("must be {what}, got {i}"));
                None
            }
            _ => {
                d.error(Some(&node.loc), self.path_of(key), format!("expected an integer, got {}", node.kind_name()));
                None
            }
        }
    }

    pub fn number(&self, key: &str, d: &mut Diagnostics) -> Option<f64> {
        let node = self.get(key)?;
        match node.value {
            Value::Int(i) => Some(i as f64),
            Value::Float(f) if f.is_finite() => Some(f),
            _ => {
                d.error(Some(&node.loc), self.path_of(key), format!("expected a number, got {}", node.kind_name()));
                None
            }
        }
    }

    /// A list of strings, each with its location.
    pub fn string_list(&self, key: &str, d: &mut Diagnostics) -> Option<Vec<(String, Loc)>> {
        let node = self.get(key)?;
        let Value::Seq(items) = &node.value else {
            d.error(
                Some(&node.loc),
                self.path_of(key),
                format!("expected a list of strings, got {}", node.kind_name()),
            );
            return None;
        };
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            if let Some(s) = expect_string(item, &index(&self.path_of(key), i), d) {
                out.push((s, item.loc.clone()));
            }
        }
        Some(out)
    }

    /// A mapping of string → scalar, scalars rendered as strings (for `env`, `headers`).
    pub fn string_map(&self, key: &str, d: &mut Diagnostics) -> Vec<(String, String, Loc)> {
        let Some(node) = self.get(key) else {
            return Vec::new();
        };
        let Some(obj) = Obj::open(node, &self.path_of(key), &[], &[], &mut Diagnostics::default()) else {
            d.error(Some(&node.loc), self.path_of(key), format!("expected a mapping, got {}", node.kind_name()));
            return Vec::new();
        };
        let mut out = Vec::new();
        for (k, v) in obj.entries() {
            let value = match &v.value {
                Value::Str(s) => s.clone(),
                Value::Int(i) => i.to_string(),
                Value::Float(f) => f.to_string(),
                Value::Bool(b) => b.to_string(),
                _ => {
                    d.error(
                        Some(&v.loc),
                        join(&obj.path, &k.name),
                        format!("expected a string, got {}", v.kind_name()),
                    );
                    continue;
                }
            };
            out.push((k.name.clone(), value, k.loc.clone()));
        }
        out
    }

    /// One of `allowed` (a string).
    pub fn one_of(&self, key: &str, allowed: &[&str], d: &mut Diagnostics) -> Option<String> {
        let value = self.string(key, d)?;
        if allowed.contains(&value.as_str()) {
            return Some(value);
        }
        let node = self.get(key)?;
        d.error(Some(&node.loc), self.path_of(key), format!("must be one of {}, got `{value}`", allowed.join(", ")));
        None
    }
}

pub fn expect_string(node: &Node, path: &str, d: &mut Diagnostics) -> Option<String> {
    match &node.value {
        Value::Str(s) => Some(s.clone()),
        _ => {
            d.error(Some(&node.loc), path, format!("expected a string, got {}", node.kind_name()));
            None
        }
    }
}
