//! The `scripted` provider: a deterministic model that plays a YAML script. It needs no key and
//! no network, so demos and tests run the whole controller without a real model. It owns the
//! script format, its validation (errors name `file:line:col`) and the per-agent play state; it
//! does not run the tools it "calls".
//!
//! # Script format
//!
//! ```yaml
//! activations:
//!   - agent: pm                 # optional: only for this agent (exact id, or a base id:
//!                               #   `worker` matches worker-1, worker-2, …)
//!     when: "Write the report"  # optional: only when the activation's prompt contains this text
//!     repeat: false             # default false: each entry is used once per agent
//!     steps:                    # one step per model call, in order
//!       - say: "I'll split the work."
//!         call:
//!           - tool: messages.send
//!             input: {recipient: worker-1, body: "Write section 1 to /artifacts/worker-1/s1.md"}
//!       - call: [{tool: coordination.wait_for_signal, input: {reason: "waiting for sections"}}]
//!   - agent: worker
//!     steps:
//!       - call:
//!           - tool: file.write
//!             input: {path: "/artifacts/{{agentId}}/s1.md", content: "written in {{activationId}}"}
//!       - error: "simulated model failure"   # the call fails with this message instead
//! ```
//!
//! Keys: the file holds `activations` (a list, may be empty) and an optional `summary` (a string):
//! with it, the loop's compaction requests (the summary of older history it asks for when the
//! context window fills) are answered with that text and play no step, so a long run whose
//! window is small compacts without the script having to foresee when; without it, a summary
//! request plays the next step like any model call. An entry has `steps` (required, at
//! least one) and optional `agent`, `when`, `repeat`. A step has `say` (the model's text) and/or
//! `call` (a list of `{tool, input}`; `input` is a mapping, default `{}`), or alone `error` (the
//! model call fails with that text; a text containing a context-overflow phrase of reference §6.6
//! such as "prompt is too long" fails as a context overflow, so the loop's compaction can be
//! exercised). Unknown keys and wrong types are errors that name `file:line:col`; a bad script
//! fails building the provider.
//!
//! Strings in `say`, `error` and tool inputs may use `{{agentId}}` and `{{activationId}}`.
//! Tool names are the real names (`messages.send`); they are sent in their model-facing form
//! (`messages_send`). A step may call a tool the request does not offer: the response still
//! carries the call, and the loop rejects it like any unknown tool a real model invents.
//!
//! # Playing
//!
//! At the first model call of an activation (a new `activation_id` for the agent) the provider
//! picks the first entry whose `agent` and `when` match and that this agent has not used up.
//! `when` is looked for in that call's system messages and its last user message: the loop sends
//! the agent's standing prompt (task, identity, rules) as the system message and this
//! activation's signals as the last user message, while older replayed history (earlier user
//! messages) does not count. A `when` that matches the standing prompt matches every activation. Each model call plays the entry's
//! next step. When its steps run out, when no entry matches, or without a script, the answer is
//! one `coordination.wait_for_signal` call (reason "scripted: nothing more to do"), or the text
//! "(scripted: nothing more to do)" when the request does not offer that tool. Steps left over
//! when an activation ends early are dropped. Play state lives in the provider instance, keyed by
//! agent, so build the provider once per run (see `ProviderPool`).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::{Value, json};

use super::{
    ChatMessage, ModelProvider, ModelRequest, ModelResponse, ProviderError, ProviderFuture, StopReason, ToolCall,
    Usage, is_context_overflow,
};
use crate::config::diag::{Diagnostics, sorted};
use crate::config::node::{Loc, Node, Value as NodeValue, parse_yaml};
use crate::config::read::{Obj, index};
use crate::toolpack::sanitize_tool_name;

/// The tool the fallback answer calls, and its reason.
pub const WAIT_TOOL: &str = "coordination.wait_for_signal";
pub const NOTHING_MORE: &str = "scripted: nothing more to do";

const TOP_KEYS: &[&str] = &["activations", "summary"];
const ENTRY_KEYS: &[&str] = &["agent", "when", "repeat", "steps"];
const STEP_KEYS: &[&str] = &["say", "call", "error"];
const CALL_KEYS: &[&str] = &["tool", "input"];

#[derive(Clone, Debug)]
struct Entry {
    agent: Option<String>,
    when: Option<String>,
    repeat: bool,
    steps: Vec<Step>,
}

#[derive(Clone, Debug)]
enum Step {
    Reply { say: Option<String>, calls: Vec<ScriptCall> },
    Fail(String),
}

#[derive(Clone, Debug)]
struct ScriptCall {
    tool: String,
    input: Value,
    /// Where the script names the tool.
    loc: Loc,
}

/// One tool call a script makes, for `suzumio check`: the `agent` of its entry (`None`: any
/// agent that plays the script), the tool as written, and where.
#[derive(Clone, Debug)]
pub struct ScriptedCallSite {
    pub agent: Option<String>,
    pub tool: String,
    pub loc: Loc,
}

/// Every tool call the script at `path` makes; its problems (located) go into `d`.
pub fn script_calls(path: &Path, d: &mut Diagnostics) -> Vec<ScriptedCallSite> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) => {
            let loc = Loc::file(Arc::from(path));
            d.error(Some(&loc), "", format!("cannot read the script: {e}"));
            return Vec::new();
        }
    };
    let root = match parse_yaml(&text, Arc::from(path)) {
        Ok(root) => root,
        Err(e) => {
            d.error(Some(&e.loc), "", e.message);
            return Vec::new();
        }
    };
    let mut sites = Vec::new();
    for entry in read_script(&root, d).entries {
        for step in &entry.steps {
            let Step::Reply { calls, .. } = step else { continue };
            sites.extend(calls.iter().map(|c| ScriptedCallSite {
                agent: entry.agent.clone(),
                tool: c.tool.clone(),
                loc: c.loc.clone(),
            }));
        }
    }
    sites
}

/// Whether a script entry's `agent` (exact id, or a base id) names `agent`.
pub fn entry_plays_for(entry_agent: Option<&str>, agent: &str) -> bool {
    entry_agent.is_none_or(|pattern| agent_matches(pattern, agent))
}

#[derive(Default)]
struct AgentState {
    activation: Option<String>,
    /// The entry the current activation plays, and its next step.
    entry: Option<usize>,
    next_step: usize,
    /// Entries (without `repeat`) this agent has used.
    used: HashSet<usize>,
    /// Tool calls made so far, for unique call ids.
    calls: u64,
}

pub struct ScriptedProvider {
    id: String,
    script: Option<PathBuf>,
    entries: Vec<Entry>,
    /// The answer to every compaction request, when the script gives one.
    summary: Option<String>,
    state: Mutex<HashMap<String, AgentState>>,
}

/// What a script file holds.
#[derive(Default)]
struct Script {
    entries: Vec<Entry>,
    summary: Option<String>,
}

impl ScriptedProvider {
    /// A provider playing the script at `script` (or only the fallback answer without one).
    pub fn load(id: &str, script: Option<&Path>) -> Result<Self, ProviderError> {
        let Some(path) = script else {
            return Ok(ScriptedProvider::with_script(id, None, Script::default()));
        };
        let text = std::fs::read_to_string(path).map_err(|e| {
            ProviderError::Config(format!("scripted provider `{id}`: cannot read script {}: {e}", path.display()))
        })?;
        ScriptedProvider::parse(id, &text, path)
    }

    /// A provider playing a script given as text; `file` is the name errors show.
    pub fn parse(id: &str, text: &str, file: &Path) -> Result<Self, ProviderError> {
        let parsed = parse_script(text, file)
            .map_err(|errors| ProviderError::Config(format!("scripted provider `{id}`: invalid script:\n{errors}")))?;
        Ok(ScriptedProvider::with_script(id, Some(file.to_path_buf()), parsed))
    }

    fn with_script(id: &str, path: Option<PathBuf>, script: Script) -> Self {
        let Script { entries, summary } = script;
        ScriptedProvider { id: id.to_string(), script: path, entries, summary, state: Mutex::new(HashMap::new()) }
    }

    fn play(&self, request: &ModelRequest) -> Result<ModelResponse, ProviderError> {
        if let Some(summary) = &self.summary
            && is_summary_request(request)
        {
            return Ok(ModelResponse {
                stop: StopReason::EndTurn,
                usage: Usage {
                    input_tokens: estimate_tokens(input_chars(request)),
                    output_tokens: estimate_tokens(summary.len()),
                    cached_input_tokens: 0,
                },
                text: summary.clone(),
                tool_calls: Vec::new(),
            });
        }
        let mut states = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let state = states.entry(request.agent_id.clone()).or_default();
        if state.activation.as_deref() != Some(request.activation_id.as_str()) {
            state.activation = Some(request.activation_id.clone());
            // A resumed activation (a restart while it waited for approval) already holds its
            // earlier turns after its prompt: it continues with the step after them.
            state.next_step = request
                .messages
                .iter()
                .rev()
                .take_while(|m| !matches!(m, ChatMessage::User(_)))
                .filter(|m| matches!(m, ChatMessage::Assistant { .. }))
                .count();
            state.entry = self.pick(request, &state.used);
            if let Some(i) = state.entry
                && !self.entries[i].repeat
            {
                state.used.insert(i);
            }
        }
        let step = state.entry.and_then(|i| self.entries[i].steps.get(state.next_step));
        state.next_step += 1;
        let fill = |text: &str| fill_placeholders(text, request);
        let (text, calls) = match step {
            Some(Step::Fail(message)) => {
                let message = fill(message);
                let provider = format!("scripted provider `{}`", self.id);
                return Err(if is_context_overflow(&message) {
                    ProviderError::ContextOverflow { provider, message }
                } else {
                    ProviderError::Scripted { provider, message }
                });
            }
            Some(Step::Reply { say, calls }) => {
                let calls: Vec<(String, Value)> =
                    calls.iter().map(|c| (sanitize_tool_name(&c.tool), fill_value(&c.input, request))).collect();
                (say.as_deref().map(fill).unwrap_or_default(), calls)
            }
            None => {
                let wait = sanitize_tool_name(WAIT_TOOL);
                if request.tools.iter().any(|t| t.name == wait) {
                    (String::new(), vec![(wait, json!({"reason": NOTHING_MORE}))])
                } else {
                    (format!("({NOTHING_MORE})"), Vec::new())
                }
            }
        };
        let tool_calls: Vec<ToolCall> = calls
            .into_iter()
            .map(|(name, arguments)| {
                state.calls += 1;
                ToolCall { id: format!("call_{}", state.calls), name, arguments }
            })
            .collect();
        let output_chars =
            text.len() + tool_calls.iter().map(|c| c.name.len() + c.arguments.to_string().len()).sum::<usize>();
        Ok(ModelResponse {
            stop: if tool_calls.is_empty() { StopReason::EndTurn } else { StopReason::ToolUse },
            usage: Usage {
                input_tokens: estimate_tokens(input_chars(request)),
                output_tokens: estimate_tokens(output_chars),
                cached_input_tokens: 0,
            },
            text,
            tool_calls,
        })
    }

    fn pick(&self, request: &ModelRequest, used: &HashSet<usize>) -> Option<usize> {
        let prompt = activation_text(&request.messages);
        self.entries.iter().enumerate().position(|(i, e)| {
            !used.contains(&i)
                && e.agent.as_deref().is_none_or(|a| agent_matches(a, &request.agent_id))
                && e.when.as_deref().is_none_or(|w| prompt.contains(w))
        })
    }
}

impl ModelProvider for ScriptedProvider {
    fn complete(&self, request: ModelRequest) -> ProviderFuture<'_> {
        let result = self.play(&request);
        Box::pin(std::future::ready(result))
    }

    fn describe(&self) -> String {
        match &self.script {
            Some(path) => format!("provider `{}` (scripted, script {})", self.id, path.display()),
            None => format!("provider `{}` (scripted, no script)", self.id),
        }
    }
}

/// `pattern` names this agent exactly, or is its base id (`worker` for `worker-3`).
fn agent_matches(pattern: &str, agent: &str) -> bool {
    pattern == agent
        || agent
            .strip_prefix(pattern)
            .and_then(|rest| rest.strip_prefix('-'))
            .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
}

/// Where `when` is looked for: the system messages and the last user message.
fn activation_text(messages: &[ChatMessage]) -> String {
    let mut parts: Vec<&str> = messages
        .iter()
        .filter_map(|m| match m {
            ChatMessage::System(text) => Some(text.as_str()),
            _ => None,
        })
        .collect();
    if let Some(ChatMessage::User(text)) = messages.iter().rev().find(|m| matches!(m, ChatMessage::User(_))) {
        parts.push(text);
    }
    parts.join("\n")
}

fn fill_placeholders(text: &str, request: &ModelRequest) -> String {
    text.replace("{{agentId}}", &request.agent_id).replace("{{activationId}}", &request.activation_id)
}

fn fill_value(value: &Value, request: &ModelRequest) -> Value {
    match value {
        Value::String(s) => Value::String(fill_placeholders(s, request)),
        Value::Array(items) => Value::Array(items.iter().map(|v| fill_value(v, request)).collect()),
        Value::Object(map) => Value::Object(map.iter().map(|(k, v)| (k.clone(), fill_value(v, request))).collect()),
        other => other.clone(),
    }
}

fn input_chars(request: &ModelRequest) -> usize {
    request
        .messages
        .iter()
        .map(|m| match m {
            ChatMessage::System(t) | ChatMessage::User(t) => t.len(),
            ChatMessage::Assistant { text, tool_calls } => {
                text.len() + tool_calls.iter().map(|c| c.arguments.to_string().len()).sum::<usize>()
            }
            ChatMessage::ToolResult { content, .. } => content.len(),
        })
        .sum()
}

/// A rough, deterministic token count (4 bytes a token), so usage statistics are not all zero.
fn estimate_tokens(chars: usize) -> u64 {
    chars.div_ceil(4) as u64
}

// ---------------------------------------------------------------------------------------------
// Script parsing

/// The entries of a script, or every problem found, one `file:line:col: path: message` a line.
// String: every located problem of the script, one a line, shown as the provider's failure.
fn parse_script(text: &str, file: &Path) -> Result<Script, String> {
    let root = parse_yaml(text, Arc::from(file)).map_err(|e| format!("{}: {}", e.loc, e.message))?;
    let mut d = Diagnostics::default();
    let script = read_script(&root, &mut d);
    if d.has_errors() {
        return Err(sorted(&d.errors).iter().map(|e| e.to_string()).collect::<Vec<_>>().join("\n"));
    }
    Ok(script)
}

fn read_script(root: &Node, d: &mut Diagnostics) -> Script {
    let Some(top) = Obj::open(root, "", TOP_KEYS, &[], d) else {
        return Script::default();
    };
    let summary = top.string("summary", d);
    let Some(list) = top.get("activations") else {
        return Script { entries: Vec::new(), summary };
    };
    let NodeValue::Seq(items) = &list.value else {
        d.error(Some(&list.loc), "activations", format!("expected a list of entries, got {}", list.kind_name()));
        return Script::default();
    };
    let entries =
        items.iter().enumerate().filter_map(|(i, item)| read_entry(item, &index("activations", i), d)).collect();
    Script { entries, summary }
}

/// The loop's compaction request: its instructions as the system message, and no tools.
fn is_summary_request(request: &ModelRequest) -> bool {
    request.tools.is_empty()
        && matches!(request.messages.first(), Some(ChatMessage::System(s)) if s == crate::activation::context::compaction::INSTRUCTIONS)
}

fn read_entry(node: &Node, path: &str, d: &mut Diagnostics) -> Option<Entry> {
    let e = Obj::open(node, path, ENTRY_KEYS, &[], d)?;
    let agent = e.string("agent", d);
    let when = e.string("when", d);
    let repeat = e.bool("repeat", d).unwrap_or(false);
    let Some(steps_node) = e.get("steps") else {
        e.missing("steps", d);
        return None;
    };
    let steps_path = e.path_of("steps");
    let NodeValue::Seq(items) = &steps_node.value else {
        d.error(Some(&steps_node.loc), steps_path, format!("expected a list of steps, got {}", steps_node.kind_name()));
        return None;
    };
    if items.is_empty() {
        d.error(Some(&steps_node.loc), steps_path, "needs at least one step");
        return None;
    }
    let steps: Vec<Step> =
        items.iter().enumerate().filter_map(|(i, item)| read_step(item, &index(&steps_path, i), d)).collect();
    (steps.len() == items.len()).then_some(Entry { agent, when, repeat, steps })
}

fn read_step(node: &Node, path: &str, d: &mut Diagnostics) -> Option<Step> {
    let s = Obj::open(node, path, STEP_KEYS, &[], d)?;
    let say = s.string("say", d);
    let error = s.string("error", d);
    let mut calls = Vec::new();
    if let Some(call_node) = s.get("call") {
        let call_path = s.path_of("call");
        let NodeValue::Seq(items) = &call_node.value else {
            d.error(
                Some(&call_node.loc),
                call_path,
                format!("expected a list of tool calls ({{tool, input}}), got {}", call_node.kind_name()),
            );
            return None;
        };
        for (i, item) in items.iter().enumerate() {
            calls.push(read_call(item, &index(&call_path, i), d)?);
        }
    }
    match (error, say, calls.is_empty()) {
        (Some(error), None, true) => Some(Step::Fail(error)),
        (Some(_), _, _) => {
            d.error(Some(&node.loc), path, "`error` cannot be combined with `say` or `call`");
            None
        }
        (None, None, true) => {
            // A mistyped `say` or `error` was reported already.
            if s.get("say").is_none() && s.get("error").is_none() {
                d.error(Some(&node.loc), path, "a step needs `say`, `call` (at least one tool) or `error`");
            }
            None
        }
        (None, say, _) => Some(Step::Reply { say, calls }),
    }
}

fn read_call(node: &Node, path: &str, d: &mut Diagnostics) -> Option<ScriptCall> {
    let c = Obj::open(node, path, CALL_KEYS, &[], d)?;
    let tool = c.req_string("tool", d)?;
    let loc = c.get("tool").map_or_else(|| c.key_loc("tool"), |n| n.loc.clone());
    if tool.trim().is_empty() {
        d.error(Some(&c.key_loc("tool")), c.path_of("tool"), "must name a tool");
        return None;
    }
    let input = match c.get("input") {
        None => json!({}),
        Some(n) if matches!(n.value, NodeValue::Map(_)) => n.to_json(),
        Some(n) => {
            d.error(
                Some(&n.loc),
                c.path_of("input"),
                format!("expected a mapping (the tool's input), got {}", n.kind_name()),
            );
            return None;
        }
    };
    Some(ScriptCall { tool, input, loc })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_ids_match_numbered_instances_only() {
        assert!(agent_matches("worker", "worker-2"));
        assert!(agent_matches("worker", "worker"));
        assert!(!agent_matches("worker", "worker-x"));
        assert!(!agent_matches("worker", "workers-1"));
        assert!(!agent_matches("pm", "pm2"));
    }
}
