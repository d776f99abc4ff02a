//! A YAML/JSON value tree in which every node remembers the file, line and column it came from.
//!
//! Owns parsing text into [`Node`]s. It knows nothing about what a project config means: the
//! loader (`load.rs`) resolves imports and `extends` on these trees, and `validate.rs` turns them
//! into typed config. Keeping the location on every node is what lets validation report every
//! error as `file:line:col` even after trees from several files were merged.

use std::collections::HashMap;
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use yaml_rust2::Yaml;
use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::{Marker, TScalarStyle};

/// Where a node starts: file, 1-based line, 1-based column.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Loc {
    pub file: Arc<Path>,
    pub line: usize,
    pub col: usize,
}

impl Loc {
    pub fn new(file: Arc<Path>, line: usize, col: usize) -> Self {
        Loc { file, line, col }
    }

    /// A location standing for a whole file (used when no finer position is known).
    pub fn file(file: Arc<Path>) -> Self {
        Loc { file, line: 0, col: 0 }
    }
}

impl fmt::Display for Loc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown = crate::config::diag::display_path(&self.file);
        match (self.line, self.col) {
            (0, _) => write!(f, "{shown}"),
            (line, 0) => write!(f, "{shown}:{line}"),
            (line, col) => write!(f, "{shown}:{line}:{col}"),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub value: Value,
    pub loc: Loc,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Seq(Vec<Node>),
    /// Keys keep their own location, and the order of the source.
    Map(Vec<(Key, Node)>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Key {
    pub name: String,
    pub loc: Loc,
}

impl Node {
    pub fn new(value: Value, loc: Loc) -> Self {
        Node { value, loc }
    }

    pub fn as_str(&self) -> Option<&str> {
        match &self.value {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_map(&self) -> Option<&[(Key, Node)]> {
        match &self.value {
            Value::Map(entries) => Some(entries),
            _ => None,
        }
    }

    pub fn get(&self, key: &str) -> Option<&Node> {
        self.as_map()?.iter().find(|(k, _)| k.name == key).map(|(_, v)| v)
    }

    /// The node a JSON pointer (`/properties/a/type`) designates, if any.
    pub fn at_pointer(&self, pointer: &str) -> Option<&Node> {
        let mut node = self;
        for raw in pointer.split('/').skip(1) {
            let segment = raw.replace("~1", "/").replace("~0", "~");
            node = match &node.value {
                Value::Map(entries) => &entries.iter().find(|(k, _)| k.name == segment)?.1,
                Value::Seq(items) => items.get(segment.parse::<usize>().ok()?)?,
                _ => return None,
            };
        }
        Some(node)
    }

    /// What kind of value this is, for "expected X, got Y" messages.
    pub fn kind_name(&self) -> &'static str {
        match self.value {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Int(_) | Value::Float(_) => "a number",
            Value::Str(_) => "a string",
            Value::Seq(_) => "a list",
            Value::Map(_) => "a mapping",
        }
    }

    /// Convert to JSON (used for JSON Schemas and payloads). Locations are dropped.
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::Value as J;
        match &self.value {
            Value::Null => J::Null,
            Value::Bool(b) => J::Bool(*b),
            Value::Int(i) => J::from(*i),
            Value::Float(f) => serde_json::Number::from_f64(*f).map_or(J::Null, J::Number),
            Value::Str(s) => J::String(s.clone()),
            Value::Seq(items) => J::Array(items.iter().map(Node::to_json).collect()),
            Value::Map(entries) => J::Object(entries.iter().map(|(k, v)| (k.name.clone(), v.to_json())).collect()),
        }
    }
}

/// A syntax error, with its position.
#[derive(Debug, Clone)]
pub struct SyntaxError {
    pub loc: Loc,
    pub message: String,
}

/// Parse one YAML document (JSON is accepted too: it is YAML 1.2).
/// An empty document gives a `Null` node.
pub fn parse_yaml(text: &str, file: Arc<Path>) -> Result<Node, SyntaxError> {
    let mut builder = TreeBuilder {
        file: file.clone(),
        stack: Vec::new(),
        anchors: HashMap::new(),
        root: None,
        error: None,
        documents: 0,
        nodes: 0,
        copied: 0,
        starts: Vec::new(),
    };
    let mut parser = Parser::new_from_str(text);
    parser.load(&mut builder, true).map_err(|e| {
        let at = marker_loc(&file, e.marker());
        match unclosed_bracket(text, e.marker().index()) {
            Some((line, col, bracket)) if line < at.line => SyntaxError {
                loc: Loc::new(file.clone(), line, col),
                message: format!(
                    "invalid YAML: this `{bracket}` is never closed (the parser stopped at line {}: {})",
                    at.line,
                    e.info()
                ),
            },
            _ => SyntaxError { loc: at, message: format!("invalid YAML: {}", e.info()) },
        }
    })?;
    if let Some(err) = builder.error {
        return Err(err);
    }
    Ok(builder.root.unwrap_or_else(|| Node::new(Value::Null, Loc::new(file, 1, 1))))
}

/// Parse strict JSON: syntax is checked by serde_json (so YAML-only syntax is refused), positions
/// come from the YAML tree of the same text.
pub fn parse_json(text: &str, file: Arc<Path>) -> Result<Node, SyntaxError> {
    if let Err(e) = serde_json::from_str::<serde_json::Value>(text) {
        let message = e.to_string();
        // serde_json appends " at line L column C"; we show the position in front instead.
        let message = match message.rfind(" at line ") {
            Some(i) => message[..i].to_string(),
            None => message,
        };
        let (mut line, mut col) = (e.line(), e.column());
        if message.starts_with("trailing comma") {
            // serde_json stops at the closing bracket; the comma before it is what to delete.
            (line, col) = previous_non_space(text, line, col).unwrap_or((line, col));
        }
        return Err(SyntaxError { loc: Loc::new(file, line, col), message: format!("invalid JSON: {message}") });
    }
    // Valid JSON from here on. The YAML parser that gives us positions does not take UTF-16
    // surrogate pairs (`"\ud83d\udca3"`, what Python's json.dump writes for emoji), so they are
    // decoded first; a column after one on the same line moves left by the escape's length.
    let decoded = decode_surrogate_pairs(text);
    parse_yaml(&decoded, file).map_err(|e| SyntaxError {
        message: e.message.strip_prefix("invalid YAML: ").map_or(e.message.clone(), |m| format!("invalid JSON: {m}")),
        loc: e.loc,
    })
}

/// `\uD8xx\uDCxx` escapes inside JSON strings replaced by the character they encode.
fn decode_surrogate_pairs(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains("\\u") {
        return std::borrow::Cow::Borrowed(text);
    }
    let hex = |s: &str| u32::from_str_radix(s, 16).ok();
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let (mut i, mut in_string) = (0, false);
    while i < bytes.len() {
        let c = bytes[i];
        if !in_string {
            in_string = c == b'"';
        } else if c == b'"' {
            in_string = false;
        } else if c == b'\\' {
            let pair = text.get(i..i + 12).filter(|p| p.get(1..2) == Some("u") && p.get(6..8) == Some("\\u"));
            let decoded = pair.and_then(|p| {
                let (high, low) = (hex(p.get(2..6)?)?, hex(p.get(8..12)?)?);
                if !(0xD800..0xDC00).contains(&high) || !(0xDC00..0xE000).contains(&low) {
                    return None;
                }
                char::from_u32(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))
            });
            if let Some(ch) = decoded {
                out.push(ch);
                i += 12;
                continue;
            }
            // Any other escape: copy it whole, so an escaped quote does not end the string.
            let next = text[i + 1..].chars().next().map_or(0, char::len_utf8);
            out.push_str(&text[i..i + 1 + next]);
            i += 1 + next;
            continue;
        }
        let ch_len = text[i..].chars().next().map_or(1, char::len_utf8);
        out.push_str(&text[i..i + ch_len]);
        i += ch_len;
    }
    std::borrow::Cow::Owned(out)
}

/// The position (1-based line and column) of the last non-blank character before `line:col`.
fn previous_non_space(text: &str, line: usize, col: usize) -> Option<(usize, usize)> {
    let offset: usize = text.split_inclusive('\n').take(line - 1).map(str::len).sum::<usize>() + col.saturating_sub(1);
    let before = text.get(..offset)?;
    let at = before.rfind(|c: char| !c.is_whitespace())?;
    let line = before[..at].matches('\n').count() + 1;
    let col = at - before[..at].rfind('\n').map_or(0, |i| i + 1) + 1;
    Some((line, col))
}

/// A flow bracket (`[` or `{`) opened before `end` and never closed, outside quotes and
/// comments: the usual cause of YAML's baffling "illegal placement" errors several lines later.
fn unclosed_bracket(text: &str, end: usize) -> Option<(usize, usize, char)> {
    let mut open: Vec<(usize, usize, char)> = Vec::new();
    for (i, line) in text.get(..end.min(text.len()))?.lines().enumerate() {
        let mut quote: Option<char> = None;
        for (col, c) in line.chars().enumerate() {
            match (quote, c) {
                (Some(q), c) if c == q => quote = None,
                (Some(_), _) => {}
                (None, '\'' | '"') => quote = Some(c),
                (None, '#') => break,
                (None, '[' | '{') => open.push((i + 1, col + 1, c)),
                (None, ']' | '}') => {
                    open.pop();
                }
                _ => {}
            }
        }
    }
    open.first().copied()
}

fn marker_loc(file: &Arc<Path>, m: &Marker) -> Loc {
    Loc::new(file.clone(), m.line().max(1), m.col() + 1)
}

/// At most this many values may be copied by aliases in one document: a few hundred bytes of
/// nested aliases ("billion laughs") would otherwise expand to gigabytes. Values written out
/// are bounded by the file size limit instead.
pub const MAX_ALIAS_NODES: usize = 100_000;

enum Frame {
    Seq {
        items: Vec<Node>,
        loc: Loc,
        anchor: usize,
    },
    /// `seen` holds the mapping's key names with their lines, so a duplicate is found in O(1).
    Map {
        entries: Vec<(Key, Node)>,
        pending_key: Option<Key>,
        loc: Loc,
        anchor: usize,
        seen: HashMap<String, usize>,
    },
}

struct TreeBuilder {
    file: Arc<Path>,
    stack: Vec<Frame>,
    /// Anchored nodes with their size in nodes (what one alias of them costs).
    anchors: HashMap<usize, (Node, usize)>,
    root: Option<Node>,
    error: Option<SyntaxError>,
    documents: usize,
    /// Nodes built so far, alias copies included.
    nodes: usize,
    /// Nodes copied by aliases so far; see [`MAX_ALIAS_NODES`].
    copied: usize,
    /// `nodes` when each open collection started, to size anchored collections.
    starts: Vec<usize>,
}

impl TreeBuilder {
    fn push_value(&mut self, node: Node) {
        let mut problem: Option<(Loc, String)> = None;
        match self.stack.last_mut() {
            None => self.root = Some(node),
            Some(Frame::Seq { items, .. }) => items.push(node),
            Some(Frame::Map { entries, pending_key, seen, .. }) => match pending_key.take() {
                Some(key) => {
                    // A mapping or list under a key is reported at its key: that is where a user
                    // looks for "agents.pm: model is required" or "extends: must be a list".
                    let mut node = node;
                    if matches!(node.value, Value::Map(_) | Value::Seq(_)) {
                        node.loc = key.loc.clone();
                    }
                    entries.push((key, node))
                }
                None => {
                    let name = match &node.value {
                        Value::Str(s) => s.clone(),
                        Value::Int(i) => i.to_string(),
                        Value::Float(f) => f.to_string(),
                        Value::Bool(b) => b.to_string(),
                        Value::Null => "null".to_string(),
                        Value::Seq(_) | Value::Map(_) => {
                            problem = Some((
                                node.loc.clone(),
                                "a mapping key must be a plain value, not a list or mapping".into(),
                            ));
                            String::new()
                        }
                    };
                    if let Some(first_line) = seen.get(&name) {
                        let message = format!("duplicate key `{name}` (first defined at line {first_line})");
                        problem = Some((node.loc.clone(), message));
                    } else {
                        seen.insert(name.clone(), node.loc.line);
                    }
                    *pending_key = Some(Key { name, loc: node.loc });
                }
            },
        }
        if let Some((loc, message)) = problem {
            self.fail(loc, &message);
        }
    }

    /// Count `n` nodes copied by an alias; false (with the error recorded) once the budget is
    /// spent.
    fn copy(&mut self, n: usize, loc: &Loc) -> bool {
        self.nodes = self.nodes.saturating_add(n);
        self.copied = self.copied.saturating_add(n);
        if self.copied > MAX_ALIAS_NODES {
            self.fail(
                loc.clone(),
                &format!(
                    "aliases in this document copy more than {MAX_ALIAS_NODES} values (the alias here copies {n}); \
                     write the values out or use fewer nested aliases"
                ),
            );
            return false;
        }
        true
    }

    fn fail(&mut self, loc: Loc, message: &str) {
        if self.error.is_none() {
            self.error = Some(SyntaxError { loc, message: message.to_string() });
        }
    }
}

impl MarkedEventReceiver for TreeBuilder {
    fn on_event(&mut self, ev: Event, mark: Marker) {
        // After the first error nothing more is built: the error is what is reported.
        if self.error.is_some() {
            return;
        }
        let loc = marker_loc(&self.file, &mark);
        match ev {
            Event::DocumentStart => {
                self.documents += 1;
                if self.documents > 1 {
                    self.fail(loc, "only one YAML document is allowed per file (found a second `---`)");
                }
            }
            Event::Scalar(text, style, anchor, _tag) => {
                let value = match style {
                    TScalarStyle::Plain => match Yaml::from_str(&text) {
                        Yaml::Null => Value::Null,
                        Yaml::Boolean(b) => Value::Bool(b),
                        Yaml::Integer(i) => Value::Int(i),
                        Yaml::Real(r) => r.parse::<f64>().map(Value::Float).unwrap_or(Value::Str(text)),
                        _ => Value::Str(text),
                    },
                    _ => Value::Str(text),
                };
                self.nodes += 1;
                let node = Node::new(value, loc);
                if anchor > 0 {
                    self.anchors.insert(anchor, (node.clone(), 1));
                }
                self.push_value(node);
            }
            Event::Alias(anchor) => match self.anchors.get(&anchor) {
                Some((node, size)) => {
                    let (node, size) = (node.clone(), *size);
                    if !self.copy(size, &loc) {
                        return;
                    }
                    self.push_value(node);
                }
                None => self.fail(loc, "alias refers to an unknown anchor"),
            },
            Event::SequenceStart(anchor, _) => {
                self.nodes += 1;
                self.starts.push(self.nodes);
                self.stack.push(Frame::Seq { items: Vec::new(), loc, anchor })
            }
            Event::MappingStart(anchor, _) => {
                self.nodes += 1;
                self.starts.push(self.nodes);
                self.stack.push(Frame::Map {
                    entries: Vec::new(),
                    pending_key: None,
                    loc,
                    anchor,
                    seen: HashMap::new(),
                })
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let size = 1 + self.nodes - self.starts.pop().unwrap_or(self.nodes);
                let (node, anchor) = match self.stack.pop() {
                    Some(Frame::Seq { items, loc, anchor }) => (Node::new(Value::Seq(items), loc), anchor),
                    Some(Frame::Map { entries, loc, anchor, .. }) => {
                        // Block mappings are marked at their first `:`; the first key is where they start.
                        let loc = match entries.first() {
                            Some((k, _)) if (k.loc.line, k.loc.col) < (loc.line, loc.col) => k.loc.clone(),
                            _ => loc,
                        };
                        (Node::new(Value::Map(entries), loc), anchor)
                    }
                    None => return,
                };
                if anchor > 0 {
                    self.anchors.insert(anchor, (node.clone(), size));
                }
                self.push_value(node);
            }
            Event::Nothing | Event::StreamStart | Event::StreamEnd | Event::DocumentEnd => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Node {
        parse_yaml(text, Arc::from(Path::new("t.yaml"))).expect("parses")
    }

    #[test]
    fn keys_and_values_keep_their_lines() {
        let node = parse("name: demo\nagents:\n  pm:\n    count: 2\n");
        let agents = node.get("agents").unwrap();
        assert_eq!(agents.loc.line, 2, "a mapping under a key is located at its key");
        let count = agents.get("pm").unwrap().get("count").unwrap();
        assert_eq!((count.value.clone(), count.loc.line, count.loc.col), (Value::Int(2), 4, 12));
    }

    #[test]
    fn quoted_scalars_stay_strings() {
        let node = parse("a: '12'\nb: 12\nc: true\nd: ~\n");
        assert_eq!(node.get("a").unwrap().value, Value::Str("12".into()));
        assert_eq!(node.get("b").unwrap().value, Value::Int(12));
        assert_eq!(node.get("c").unwrap().value, Value::Bool(true));
        assert_eq!(node.get("d").unwrap().value, Value::Null);
    }

    #[test]
    fn duplicate_keys_are_refused_with_both_lines() {
        let err = parse_yaml("a: 1\nb: 2\na: 3\n", Arc::from(Path::new("t.yaml"))).unwrap_err();
        assert_eq!((err.loc.line, err.message.as_str()), (3, "duplicate key `a` (first defined at line 1)"));
    }

    #[test]
    fn unclosed_flow_brackets_are_blamed_where_they_open() {
        let err = parse_yaml("a: [x, y\nb: 1\n", Arc::from(Path::new("t.yaml"))).unwrap_err();
        assert_eq!((err.loc.line, err.loc.col), (1, 4));
        assert!(err.message.starts_with("invalid YAML: this `[` is never closed"), "{}", err.message);
    }

    #[test]
    fn pointers_find_nested_nodes() {
        let node = parse("properties:\n  a: {type: strng}\n");
        assert_eq!(node.at_pointer("/properties/a/type").map(|n| n.loc.line), Some(2));
        assert!(node.at_pointer("/properties/b").is_none());
    }

    #[test]
    fn alias_bombs_are_refused_within_the_budget() {
        let mut text = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
        for level in 1..8 {
            let prev = (b'a' + level - 1) as char;
            let name = (b'a' + level) as char;
            text.push_str(&format!("{name}: &{name} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n"));
        }
        let e = parse_yaml(&text, Arc::from(Path::new("bomb.yaml"))).unwrap_err();
        assert!(e.message.starts_with("aliases in this document copy more than 100000 values"), "{}", e.message);
        assert!(e.loc.line > 1, "{}", e.loc);
    }

    #[test]
    fn large_mappings_check_duplicates_in_linear_time() {
        let text: String = (0..100_000).map(|i| format!("k{i}: {i}\n")).collect();
        let node = parse_yaml(&text, Arc::from(Path::new("big.yaml"))).unwrap_or_else(|e| panic!("{}", e.message));
        assert_eq!(node.as_map().map(<[_]>::len), Some(100_000));
        let e = parse_yaml(&format!("{text}k7: again\n"), Arc::from(Path::new("big.yaml"))).unwrap_err();
        assert_eq!(e.message, "duplicate key `k7` (first defined at line 8)");
    }

    #[test]
    fn json_surrogate_pairs_are_decoded() {
        let text = "{\"icon\": \"\\ud83d\\udca3\", \"q\": \"a\\\"b\", \"plain\": \"\\u00e9\"}";
        let node = parse_json(text, Arc::from(Path::new("m.json"))).unwrap_or_else(|e| panic!("{}", e.message));
        assert_eq!(node.to_json(), serde_json::json!({"icon": "💣", "q": "a\"b", "plain": "é"}));
    }

    #[test]
    fn aliases_copy_the_anchored_node() {
        let node = parse("base: &b {x: 1}\nother: *b\n");
        assert_eq!(node.get("other").unwrap().get("x").unwrap().value, Value::Int(1));
    }

    #[test]
    fn json_syntax_errors_point_at_the_position() {
        let err = parse_json("{\n  \"id\": \"x\",\n}\n", Arc::from(Path::new("m.json"))).unwrap_err();
        assert_eq!((err.loc.line, err.loc.col), (2, 12), "points at the comma");
        assert!(err.message.starts_with("invalid JSON: trailing comma"), "{}", err.message);
    }
}
