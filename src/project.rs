//! A loaded project: its validated config together with its toolpack registry. This is the one
//! entry point every command uses, so `check`, `tools` and (later) `run` see the same thing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::config::{self, Diagnostics, InvalidInput, ProjectConfig, ToolpackRef, load::EnvSource};
use crate::toolpack::mcp::{self, McpListing};
use crate::toolpack::{AgentToolset, ToolpackRegistry};

pub struct Project {
    /// Shared by every version of a running project: an MCP list change keeps the config.
    pub config: Arc<ProjectConfig>,
    pub registry: ToolpackRegistry,
    /// Warnings found while loading; they never fail a load.
    pub warnings: Diagnostics,
    /// The toolpack list of the config, to build the registry again with new MCP lists.
    pub toolpacks: Vec<ToolpackRef>,
    /// The MCP lists the registry was built from (discovered or cached; not pinned ones).
    pub mcp_lists: BTreeMap<String, McpListing>,
}

impl Project {
    /// Load config and toolpacks, collecting every error from both before failing. An MCP
    /// pack's tools come from its pinned list or from the discovery cache in `.suzumio/mcp/`.
    pub fn load(dir: &Path, env: &dyn EnvSource) -> Result<Project, InvalidInput> {
        Self::load_with(dir, env, &BTreeMap::new())
    }

    /// [`load`](Self::load), with MCP tool lists just discovered (they win over the cache).
    pub fn load_with(
        dir: &Path,
        env: &dyn EnvSource,
        discovered: &BTreeMap<String, McpListing>,
    ) -> Result<Project, InvalidInput> {
        let config::Loaded { config, toolpacks, diagnostics: mut d } = config::load_config(dir, env)?;
        let mcp_lists = mcp_listings(dir, &toolpacks, discovered);
        pinned_differences(dir, &toolpacks, discovered, &mut d);
        let registry = ToolpackRegistry::build_with(&toolpacks, &mcp_lists, &mut d);
        match (config, registry) {
            (Some(mut config), Some(registry)) if !d.has_errors() => {
                registry.expand_groups(&mut config.agents, &mut d);
                registry.check_allowlists(&config.agents, &mut d);
                check_hooks(&config, &registry, &mut d);
                check_shell_path_rules(dir, &config, &registry, &mut d);
                if d.has_errors() {
                    return Err(InvalidInput(d));
                }
                Ok(Project {
                    config: Arc::new(config),
                    registry,
                    warnings: Diagnostics { errors: Vec::new(), warnings: d.warnings },
                    toolpacks,
                    mcp_lists,
                })
            }
            _ => Err(InvalidInput(d)),
        }
    }

    /// This project with `listing` as the tool list of its MCP pack (the config as loaded: an
    /// edited `suzumio.yaml` is not read again). Warnings of the new list are returned: those of
    /// its pack only, as the other packs' were said when the project was loaded (a server that
    /// has not listed its tools yet is often being listed at this very moment).
    pub fn with_mcp_list(&self, listing: McpListing) -> Result<(Project, Diagnostics), Diagnostics> {
        let id = listing.id.clone();
        let mut lists = self.mcp_lists.clone();
        lists.insert(id.clone(), listing);
        let mut d = Diagnostics::default();
        let registry = ToolpackRegistry::build_with(&self.toolpacks, &lists, &mut d).ok_or_else(|| d.clone())?;
        d.warnings.retain(|w| w.pack.as_deref() == Some(id.as_str()));
        // The config stays (a served project's config never changes): `group:` entries keep
        // the tools they had when the project loaded; an MCP pack's changing list is reached
        // with `<pack>.*`.
        let project = Project {
            config: self.config.clone(),
            registry,
            warnings: self.warnings.clone(),
            toolpacks: self.toolpacks.clone(),
            mcp_lists: lists,
        };
        Ok((project, d))
    }

    pub fn toolsets(&self) -> Vec<AgentToolset> {
        self.config.agents.iter().map(|a| self.registry.resolve_agent(a)).collect()
    }

    /// The MCP packs whose tools are not known: not pinned, and never listed with their current
    /// command or URL.
    pub fn unlisted_mcp_packs(&self) -> impl Iterator<Item = &config::McpPackConfig> {
        self.registry
            .packs()
            .iter()
            .filter_map(|p| p.mcp())
            .filter(|m| m.pinned.is_none() && !self.mcp_lists.contains_key(&m.id))
    }

    /// The MCP packs an agent's allowlist may reach, before their servers have listed anything.
    pub fn mcp_packs_for(&self, agent: &str) -> Vec<&config::McpPackConfig> {
        let Some(agent) = self.config.agent(agent) else { return Vec::new() };
        self.registry
            .packs()
            .iter()
            .filter_map(|p| p.mcp())
            .filter(|m| agent.tools.may_reach(&format!("{}.", m.id)))
            .collect()
    }
}

/// A warning for each pinned MCP pack whose server last listed something else (now, or in the
/// discovery cache of the last run).
fn pinned_differences(
    dir: &Path,
    refs: &[ToolpackRef],
    discovered: &BTreeMap<String, McpListing>,
    d: &mut Diagnostics,
) {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    for r in refs {
        let ToolpackRef::Mcp(m) = r else { continue };
        if m.pinned.is_none() {
            continue;
        }
        let live = discovered
            .get(&m.id)
            .filter(|l| l.error.is_none())
            .map(|l| (l.clone(), "now".to_string()))
            .or_else(|| mcp::read_cache(&dir, m).map(|c| (c.listing, format!("at {}", c.discovered_at))));
        let Some((live, when)) = live else { continue };
        if let Some(diff) = mcp::pinned_difference(m, &live.tools) {
            d.warning(
                Some(&m.loc),
                "",
                format!(
                    "toolpack {}: {} listed other tools {when} than the ones pinned ({diff}); the pinned list is used",
                    m.id,
                    live.server()
                ),
            );
        }
    }
}

/// Each MCP pack's list: discovered now, else the cache made with its current transport.
fn mcp_listings(
    dir: &Path,
    refs: &[ToolpackRef],
    discovered: &BTreeMap<String, McpListing>,
) -> BTreeMap<String, McpListing> {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    refs.iter()
        .filter_map(|r| match r {
            // A failed listing is kept only when there is nothing better: it says why there
            // are no tools.
            ToolpackRef::Mcp(m) => {
                let fresh = discovered.get(&m.id);
                fresh
                    .filter(|l| l.error.is_none())
                    .cloned()
                    .or_else(|| mcp::read_cache(&dir, m).map(|c| c.listing))
                    .or_else(|| fresh.cloned())
                    .map(|l| (m.id.clone(), l))
            }
            _ => None,
        })
        .collect()
}

/// The project a running controller serves, replaced when an MCP server's tools change.
///
/// A reader takes the version served now ([`snapshot`](Self::snapshot)) and keeps it for as long
/// as it holds it, so one activation or call sees one project throughout; a replaced version is
/// freed when its last reader drops it. The config is the same in every version, so it is read
/// here without taking one.
pub struct LiveProject {
    pub config: Arc<ProjectConfig>,
    current: ArcSwap<Project>,
}

impl LiveProject {
    pub fn new(project: Arc<Project>) -> LiveProject {
        LiveProject { config: Arc::clone(&project.config), current: ArcSwap::new(project) }
    }

    /// The project served now, to hold.
    pub fn snapshot(&self) -> Arc<Project> {
        self.current.load_full()
    }

    /// Serve `project` from now on (readers holding the old version keep it).
    pub fn replace(&self, project: Project) {
        debug_assert!(Arc::ptr_eq(&project.config, &self.config), "a list change keeps the config");
        self.current.store(Arc::new(project));
    }
}

/// A warning for each path `deny` rule that covers an agent's file tools but not its
/// `shell.exec`/`shell.start`: the same paths stay open to the agent's commands. (For shell
/// even such a rule only sees the paths a line names; the container's mounts are the boundary.)
pub fn check_shell_path_rules(
    dir: &Path,
    config: &crate::config::ProjectConfig,
    registry: &crate::toolpack::ToolpackRegistry,
    d: &mut crate::config::Diagnostics,
) {
    use crate::config::RuleDecision;
    const SHELL: [&str; 2] = ["shell.exec", "shell.start"];
    let project_rules =
        config.permissions.rules.iter().enumerate().map(|(i, r)| (format!("permissions.rules[{i}]"), r, None));
    let agent_rules = config.agents.iter().flat_map(|a| {
        a.permissions
            .rules
            .iter()
            .enumerate()
            .map(move |(i, r)| (format!("agents.{}.permissions.rules[{i}]", a.id), r, Some(a.id.as_str())))
    });
    for (path, rule, only) in project_rules.chain(agent_rules) {
        if rule.decision != RuleDecision::Deny || rule.paths.is_empty() || SHELL.iter().any(|t| rule.tool.matches(t)) {
            continue;
        }
        let exposed: Vec<&str> = config
            .agents
            .iter()
            .filter(|a| only.is_none_or(|id| id == a.id))
            .filter(|a| {
                let file_tool = registry.tools().any(|(_, t)| {
                    t.name.starts_with("file.") && rule.tool.matches(&t.name) && registry.may_call(a, &t.name)
                });
                // Another deny rule that keeps the same paths from the agent's commands covers it.
                let shell_rule = config.permissions.rules.iter().chain(&a.permissions.rules).any(|r| {
                    r.decision == RuleDecision::Deny
                        && SHELL.iter().any(|t| r.tool.matches(t))
                        && rule.paths.iter().all(|p| r.paths.contains(p))
                });
                file_tool && !shell_rule && SHELL.iter().any(|t| registry.may_call(a, t))
            })
            .map(|a| a.id.as_str())
            .collect();
        if exposed.is_empty() {
            continue;
        }
        // The rule's source is `file:line`; the file is named as the config's own locations name it.
        let loc = rule.source.rsplit_once(':').and_then(|(file, line)| {
            let file: PathBuf = dir.join(file).components().filter(|c| *c != std::path::Component::CurDir).collect();
            Some(crate::config::node::Loc { file: file.into(), line: line.parse().ok()?, col: 1 })
        });
        let agents = match exposed.split_last() {
            Some((last, [])) => last.to_string(),
            Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
            None => String::new(),
        };
        d.warning(
            loc.as_ref(),
            &path,
            format!(
                "this deny rule keeps paths [{}] from the file tools but not from shell.exec/shell.start, which {} can also call; add a rule with `tool: shell.*` and the same paths (it sees the paths a command line names), and keep the paths out of the container's mounts, which is the real boundary for commands",
                rule.paths.join(", "),
                agents
            ),
        );
    }
}

/// `permissions.hooks` against the registry: a named pack must be a local pack (only those have
/// a `controller.mjs`); an entry that reaches no local pack's hooks is a warning.
pub fn check_hooks(
    config: &crate::config::ProjectConfig,
    registry: &crate::toolpack::ToolpackRegistry,
    d: &mut crate::config::Diagnostics,
) {
    use crate::toolpack::PackSource;
    for (i, target) in config.permissions.hooks.iter().enumerate() {
        let path = format!("permissions.hooks[{i}]");
        match &target.pack {
            Some(id) => match registry.pack(id) {
                None => d.error(Some(&target.loc), &path, format!("Unknown toolpack: {id}")),
                Some(p) if !matches!(p.source, PackSource::Local { .. }) => d.error(
                    Some(&target.loc),
                    &path,
                    format!("{id} is a built-in toolpack; hooks are exported by a local pack's controller.mjs"),
                ),
                Some(_) => {}
            },
            None => {
                let reaches = registry.tools().any(|(pack, tool)| {
                    target.tools.matches(&tool.name) && matches!(pack.source, PackSource::Local { .. })
                });
                if !reaches {
                    d.warning(
                        Some(&target.loc),
                        &path,
                        format!("`{}` matches no tool of a local pack, so no hook runs; name the pack whose hooks should see these calls with {{tools, pack}}", target.tools),
                    );
                }
            }
        }
    }
}
