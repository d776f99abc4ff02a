//! `backend.runner.model` and `backend.runner.models`: providers (kind, key source, base URL,
//! timeouts, script) and presets (a provider's model with its sampling settings, or a
//! `model-list` of single-model presets), every reference between them checked.

use std::path::PathBuf;

use crate::config::diag::Diagnostics;
use crate::config::load::base_dir;
use crate::config::model::*;
use crate::config::node::{Node, Value};
use crate::config::read::{Obj, join};

const MODELS_KEYS: &[&str] = &["providers", "presets"];
const PROVIDER_KEYS: &[&str] = &[
    "type",
    "apiKey",
    "apiKeyEnv",
    "baseURL",
    "baseURLEnv",
    "headers",
    "timeoutMs",
    "chunkTimeoutMs",
    "options",
    "script",
];
const PRESET_KEYS: &[&str] = &[
    "provider",
    "model",
    "model-list",
    "modelList",
    "apiModel",
    "reasoningEffort",
    "temperature",
    "topP",
    "topK",
    "maxOutputTokens",
    "contextLimit",
    "contextWindow",
    "compactAt",
    "toolChoice",
    "providerOptions",
    "headers",
    "script",
    "stream",
    "inputPerMTok",
    "outputPerMTok",
    "cachedInputPerMTok",
];

pub(super) fn read(r: &Obj, d: &mut Diagnostics) -> ModelsConfig {
    let mut config = ModelsConfig { default_preset: r.string("model", d), ..Default::default() };
    let Some(node) = r.get("models") else {
        d.error(Some(&r.node.loc), "backend.runner.models", "backend.runner.models is required");
        return config;
    };
    let Some(m) = Obj::open(node, "backend.runner.models", MODELS_KEYS, &[], d) else {
        return config;
    };
    let providers = m
        .get("providers")
        .and_then(|n| Obj::open(n, "backend.runner.models.providers", &[], &[], &mut Diagnostics::default()));
    let provider_entries = providers.as_ref().map(|p| p.entries()).unwrap_or(&[]);
    if provider_entries.is_empty() {
        d.error(
            Some(&m.node.loc),
            "backend.runner.models.providers",
            "backend.runner.models.providers needs at least one provider",
        );
    }
    for (key, node) in provider_entries {
        if let Some(p) = read_provider(&key.name, node, d) {
            config.providers.push(p);
        }
    }
    let presets = m
        .get("presets")
        .and_then(|n| Obj::open(n, "backend.runner.models.presets", &[], &[], &mut Diagnostics::default()));
    let preset_entries = presets.as_ref().map(|p| p.entries()).unwrap_or(&[]);
    if preset_entries.is_empty() {
        d.error(
            Some(&m.node.loc),
            "backend.runner.models.presets",
            "backend.runner.models.presets needs at least one preset",
        );
    }
    let preset_names: Vec<&str> = preset_entries.iter().map(|(k, _)| k.name.as_str()).collect();
    for (key, node) in preset_entries {
        if let Some(p) = read_preset(&key.name, node, &config.providers, &preset_names, d) {
            config.presets.push(p);
        }
    }
    // model-list entries must be single-model presets.
    for (key, node) in preset_entries {
        let Some(preset) = config.preset(&key.name) else {
            continue;
        };
        if let PresetTarget::List(list) = &preset.target {
            for entry in list {
                if matches!(config.preset(entry).map(|p| &p.target), Some(PresetTarget::List(_))) {
                    d.error(
                        Some(&node.loc),
                        format!("backend.runner.models.presets.{}.model-list", key.name),
                        format!("model-list entry {entry} is itself a model-list; list single-model presets"),
                    );
                }
            }
        }
    }
    if let Some(default) = &config.default_preset
        && !preset_entries.is_empty()
        && !preset_names.contains(&default.as_str())
    {
        d.error(Some(&r.key_loc("model")), "backend.runner.model", format!("unknown model preset: {default}"));
    }
    config
}

fn read_provider(id: &str, node: &Node, d: &mut Diagnostics) -> Option<ProviderConfig> {
    let path = join("backend.runner.models.providers", id);
    let p = Obj::open(node, &path, PROVIDER_KEYS, &[], d)?;
    let kind_name = p.req_string("type", d)?;
    let Some(kind) = ProviderKind::from_name(&kind_name) else {
        d.error(
            Some(&p.key_loc("type")),
            p.path_of("type"),
            format!("must be one of {}, got `{kind_name}`", ProviderKind::NAMES.join(", ")),
        );
        return None;
    };
    if p.get("apiKey").is_some() {
        d.warning(
            Some(&p.key_loc("apiKey")),
            p.path_of("apiKey"),
            "an API key is written in the config file; prefer apiKeyEnv so the key stays out of files",
        );
    }
    let timeout_ms = match p.get("timeoutMs").map(|n| &n.value) {
        Some(Value::Bool(false)) => None,
        Some(_) => p.int_at_least("timeoutMs", 1, d).map(|v| v as u64),
        None => Some(120_000),
    };
    // How long a streamed answer may go quiet; `false` = no limit but timeoutMs.
    let chunk_timeout_ms = match p.get("chunkTimeoutMs").map(|n| &n.value) {
        Some(Value::Bool(false)) | None => None,
        Some(_) => p.int_at_least("chunkTimeoutMs", 1, d).map(|v| v as u64),
    };
    let script = p.string("script", d).and_then(|s| script_path(&s, &p, d));
    if script.is_some() && kind != ProviderKind::Scripted {
        d.error(Some(&p.key_loc("script")), p.path_of("script"), "only providers of type scripted take a script");
    }
    Some(ProviderConfig {
        id: id.to_string(),
        kind,
        api_key: p.string("apiKey", d),
        api_key_env: p.string("apiKeyEnv", d),
        base_url: p.string("baseURL", d),
        base_url_env: p.string("baseURLEnv", d),
        headers: p.string_map("headers", d).into_iter().map(|(k, v, _)| (k, v)).collect(),
        timeout_ms,
        chunk_timeout_ms,
        options: p.get("options").map_or(serde_json::json!({}), Node::to_json),
        script,
    })
}

/// `contextWindow`, else the reference's `contextLimit` (the same thing under its older name).
fn context_window(p: &Obj, d: &mut Diagnostics) -> u64 {
    let window = p.int_at_least("contextWindow", 1, d);
    let limit = p.int_at_least("contextLimit", 1, d);
    if window.is_some() && limit.is_some() {
        d.error(
            Some(&p.key_loc("contextLimit")),
            p.path_of("contextLimit"),
            "set contextWindow or contextLimit, not both (contextLimit is the older name of contextWindow)",
        );
    }
    window.or(limit).map_or(DEFAULT_CONTEXT_WINDOW, |v| v as u64)
}

fn compact_at(p: &Obj, d: &mut Diagnostics) -> f64 {
    match p.number("compactAt", d) {
        Some(f) if f > 0.0 && f <= 1.0 => f,
        Some(f) => {
            d.error(
                Some(&p.key_loc("compactAt")),
                p.path_of("compactAt"),
                format!(
                    "compactAt is the share of contextWindow at which history is compacted: a number in (0, 1], got {f}"
                ),
            );
            DEFAULT_COMPACT_AT
        }
        None => DEFAULT_COMPACT_AT,
    }
}

const DEFAULT_CONTEXT_WINDOW: u64 = 260_000;
const DEFAULT_COMPACT_AT: f64 = 0.8;

fn script_path(raw: &str, obj: &Obj, d: &mut Diagnostics) -> Option<PathBuf> {
    let path = base_dir(&obj.key_loc("script").file).join(raw);
    match path.canonicalize() {
        Ok(p) if p.is_file() => Some(p),
        _ => {
            d.error(Some(&obj.key_loc("script")), obj.path_of("script"), format!("script file does not exist: {raw}"));
            None
        }
    }
}

fn read_preset(
    id: &str,
    node: &Node,
    providers: &[ProviderConfig],
    presets: &[&str],
    d: &mut Diagnostics,
) -> Option<PresetConfig> {
    let path = join("backend.runner.models.presets", id);
    let p = Obj::open(node, &path, PRESET_KEYS, &[], d)?;
    let list_key = if p.get("model-list").is_some() { "model-list" } else { "modelList" };
    let list = p.string_list(list_key, d);
    let provider = p.string("provider", d);
    let model = p.string("model", d);
    let api_model = p.string("apiModel", d);
    let target = match list {
        Some(_) if provider.is_some() || model.is_some() || api_model.is_some() => {
            d.error(Some(&p.node.loc), &path, "modelList presets cannot also set provider/model/apiModel");
            return None;
        }
        Some(list) if list.is_empty() => {
            d.error(Some(&p.key_loc(list_key)), p.path_of(list_key), "model-list cannot be empty");
            return None;
        }
        Some(list) => {
            for (entry, loc) in &list {
                if !presets.contains(&entry.as_str()) {
                    d.error(Some(loc), p.path_of(list_key), format!("model-list entry is not a preset: {entry}"));
                }
            }
            PresetTarget::List(list.into_iter().map(|(e, _)| e).collect())
        }
        None => {
            let Some(provider) = provider else {
                d.error(Some(&p.node.loc), &path, "model presets need provider and model, or model-list");
                return None;
            };
            let Some(provider_config) = providers.iter().find(|pc| pc.id == provider) else {
                d.error(
                    Some(&p.key_loc("provider")),
                    p.path_of("provider"),
                    format!("Preset {id} uses unknown provider: {provider}"),
                );
                return None;
            };
            let model = match (model, &provider_config.kind) {
                (Some(m), _) => m,
                (None, ProviderKind::Scripted) => "scripted".to_string(),
                (None, _) => {
                    d.error(Some(&p.node.loc), &path, "model presets need provider and model, or model-list");
                    return None;
                }
            };
            PresetTarget::Model { provider, model, api_model }
        }
    };
    let tool_choice = p.one_of("toolChoice", &["auto", "required", "none"], d);
    let prices = super::budgets::prices(&p, d);
    if matches!(target, PresetTarget::List(_)) && prices.is_set() {
        // Each model of the list is priced by its own preset.
        d.error(Some(&p.node.loc), &path, "model-list presets take no prices; set them on the listed presets");
    }
    Some(PresetConfig {
        id: id.to_string(),
        target,
        reasoning_effort: p.string("reasoningEffort", d),
        temperature: p.number("temperature", d),
        top_p: p.number("topP", d),
        top_k: p.int_at_least("topK", 1, d).map(|v| v as u64),
        max_output_tokens: p.int_at_least("maxOutputTokens", 1, d).map(|v| v as u64),
        context_window: context_window(&p, d),
        compact_at: compact_at(&p, d),
        tool_choice,
        provider_options: p.get("providerOptions").map_or(serde_json::json!({}), Node::to_json),
        headers: p.string_map("headers", d).into_iter().map(|(k, v, _)| (k, v)).collect(),
        script: p.string("script", d).and_then(|s| script_path(&s, &p, d)),
        stream: p.bool("stream", d).unwrap_or(true),
        prices,
    })
}
