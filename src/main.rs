//! The `suzumio` CLI: parse arguments, call the library, map the outcome to an exit code
//! (0 ok, 1 failure at run time, 2 invalid input or config).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use suzumio::commands;
use suzumio::config::InvalidInput;

#[derive(Parser)]
#[command(name = "suzumio", version = suzumio::VERSION, about = "Run multi-agent projects: hardened runner containers, allowlisted toolpacks, a signal scheduler.")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Validate a project's suzumio.yaml and toolpacks; show each agent's tools and mounted packs.
    Check {
        /// Project directory (holding suzumio.yaml) or the config file itself.
        dir: PathBuf,
    },
    /// Print the resolved tool catalogue: name, pack, description, approval, allowed agents.
    Tools {
        /// Project directory (holding suzumio.yaml) or the config file itself.
        dir: PathBuf,
        /// Only the tools this agent may use.
        #[arg(long)]
        agent: Option<String>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Check { dir } => commands::check(&dir),
        Command::Tools { dir, agent, json } => commands::tools(&dir, agent.as_deref(), json),
    };
    match result {
        Ok(out) => {
            for w in suzumio::config::diag::sorted(&out.warnings) {
                eprintln!("warning: {w}");
            }
            print!("{}", out.stdout);
            ExitCode::SUCCESS
        }
        Err(InvalidInput(d)) => {
            for w in suzumio::config::diag::sorted(&d.warnings) {
                eprintln!("warning: {w}");
            }
            eprintln!("{}", InvalidInput(d));
            ExitCode::from(2)
        }
    }
}
