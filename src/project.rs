//! A loaded project: its validated config together with its toolpack registry. This is the one
//! entry point every command uses, so `check`, `tools` and (later) `run` see the same thing.

use std::path::Path;

use crate::config::{self, Diagnostics, InvalidInput, ProjectConfig, load::EnvSource};
use crate::toolpack::{AgentToolset, ToolpackRegistry};

pub struct Project {
    pub config: ProjectConfig,
    pub registry: ToolpackRegistry,
    /// Warnings found while loading; they never fail a load.
    pub warnings: Diagnostics,
}

impl Project {
    /// Load config and toolpacks, collecting every error from both before failing.
    pub fn load(dir: &Path, env: &dyn EnvSource) -> Result<Project, InvalidInput> {
        let config::Loaded { config, toolpacks, diagnostics: mut d } = config::load_config(dir, env)?;
        let registry = ToolpackRegistry::build(&toolpacks, &mut d);
        match (config, registry) {
            (Some(config), Some(registry)) if !d.has_errors() => {
                registry.check_allowlists(&config.agents, &mut d);
                crate::permissions::check_hooks(&config, &registry, &mut d);
                if d.has_errors() {
                    return Err(InvalidInput(d));
                }
                Ok(Project { config, registry, warnings: Diagnostics { errors: Vec::new(), warnings: d.warnings } })
            }
            _ => Err(InvalidInput(d)),
        }
    }

    pub fn toolsets(&self) -> Vec<AgentToolset> {
        self.config.agents.iter().map(|a| self.registry.resolve_agent(a)).collect()
    }
}
