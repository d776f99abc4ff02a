//! The `suzumio` CLI: parse arguments, call the library, map the outcome to an exit code
//! (0 ok, 1 failure at run time, 2 invalid input or config).

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use indicatif::MultiProgress;
use suzumio::commands::image::ImageBuild;
use suzumio::commands::scaffold::{InitOptions, Template, init, toolpack_new};
use suzumio::commands::{self, CliError, Output};
use suzumio::config::diag::sorted;
use suzumio::config::{BackendKind, Priority};
use suzumio::controller::RunOptions;
use suzumio::store::{ActivationStatus, ProjectStatus, SignalStatus};
use suzumio::web::AllowedHost;

#[derive(Parser)]
#[command(
    name = "suzumio",
    version = suzumio::VERSION,
    about = "Run multi-agent projects: hardened runner containers, allowlisted toolpacks, a signal scheduler."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Write a runnable project into a new or empty directory (scripted model: no API key needed).
    Init {
        /// The project directory to create (refused when it is not empty, unless --force).
        dir: PathBuf,
        /// minimal: one agent; team: a coordinator `pm` and two workers; demo: like projects/demo.
        #[arg(long, value_enum, default_value_t = TemplateArg::Minimal)]
        template: TemplateArg,
        /// Write into a directory that is not empty (files of the template are overwritten).
        #[arg(long)]
        force: bool,
        /// Copy the packaged scheduler and plan packs into toolpacks/ for editing, registered by path.
        #[arg(long)]
        copy_packs: bool,
    },
    /// Toolpacks: write a starter pack.
    Toolpack {
        #[command(subcommand)]
        command: ToolpackCommand,
    },
    /// Validate a project's suzumio.yaml and toolpacks; show each agent's tools and mounted packs.
    Check {
        /// Project directory (holding suzumio.yaml) or the config file itself.
        dir: PathBuf,
        /// Print JSON instead of text (warnings included in it).
        #[arg(long)]
        json: bool,
        /// Where to start an MCP server whose tools are not known yet, to list them (default: the
        /// project's backend).
        #[arg(long, value_enum)]
        backend: Option<BackendArg>,
    },
    /// Print the resolved tool catalogue: name, pack, description, approval, allowed agents, and
    /// the tools switched off per agent; `tools off|on` switches an agent's tools at run time.
    #[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
    Tools {
        #[command(subcommand)]
        command: Option<ToolsCommand>,
        /// Project directory (holding suzumio.yaml) or the config file itself.
        #[arg(required = true)]
        dir: Option<PathBuf>,
        /// Only the tools this agent may use.
        #[arg(long)]
        agent: Option<String>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Run the project: open its state and serve the HTTP API until Ctrl-C.
    Run {
        /// Project directory (holding suzumio.yaml) or the config file itself.
        dir: PathBuf,
        /// Address to listen on. Anything but loopback requires --token.
        #[arg(long, default_value = "127.0.0.1")]
        host: IpAddr,
        /// Port to listen on (0 picks a free one).
        #[arg(long, default_value_t = 39400)]
        port: u16,
        /// API token required as `Authorization: Bearer <token>` on every request.
        #[arg(long, env = "SUZUMIO_API_TOKEN", hide_env_values = true)]
        token: Option<String>,
        /// Another host name the API answers for, as NAME or NAME:PORT (e.g. a reverse proxy's;
        /// repeatable). Without it only localhost, 127.0.0.1 and [::1] on the port are (plus IP
        /// addresses when listening beyond loopback).
        #[arg(long = "allowed-host", value_name = "NAME", env = "SUZUMIO_ALLOWED_HOSTS", value_delimiter = ',')]
        allowed_hosts: Vec<AllowedHost>,
        /// Run the agents' runners as Docker containers (default) or local processes (no isolation).
        #[arg(long, value_enum)]
        backend: Option<BackendArg>,
        /// Exit once every agent is quiet, nothing is pending and nothing is due within a minute
        /// (exit 1 if an activation failed).
        #[arg(long)]
        until_idle: bool,
        /// Serve without starting the project: a new project stays `initialized` until
        /// `suzumio start` or the WebUI starts it. (Without it, `run` starts a new project; a
        /// stopped, submitted or completed one keeps its status.)
        #[arg(long)]
        paused: bool,
        /// Send the project's task to the coordinator as the user's first message, as
        /// `kickoff: true` in suzumio.yaml does: only while the project has no message yet, so
        /// a restart does not send it again.
        #[arg(long)]
        kickoff: bool,
        /// How log lines are written on stderr: `text` for people, `json` (one object per
        /// line: timestamp, level, fields, target) for log collectors.
        #[arg(long, value_enum, default_value_t = LogFormat::Text)]
        log_format: LogFormat,
    },
    /// Send a message (as the user) to an agent or a channel.
    Send {
        /// Project directory (holding suzumio.yaml) or the config file itself.
        dir: PathBuf,
        /// An agent id, `user`, or a channel such as #project.
        recipient: String,
        /// P0 interrupts, P1 at the next tool call, P2/P3 queue.
        #[arg(long, value_enum, default_value_t = PriorityArg::P3)]
        priority: PriorityArg,
        /// The message.
        #[arg(required = true, num_args = 1..)]
        body: Vec<String>,
        /// Print the message and signal ids as JSON.
        #[arg(long)]
        json: bool,
    },
    /// The project's status, agents, pending work and report.
    Status {
        /// Project directory (holding suzumio.yaml) or the config file itself.
        dir: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// List activations, newest first: agent, status, duration, tool calls, tokens, result.
    Activations {
        /// Project directory (holding suzumio.yaml) or the config file itself.
        dir: PathBuf,
        /// Only this agent's activations.
        #[arg(long)]
        agent: Option<String>,
        /// Only activations with this status.
        #[arg(long, value_enum)]
        status: Option<ActivationStatusArg>,
        /// How many (at most 500).
        #[arg(long, default_value_t = 20)]
        limit: usize,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Show one activation turn by turn: the model's text, each tool call with its input and
    /// output or error, durations, tokens and cost, and signals that arrived at tool calls.
    Show {
        /// Project directory (holding suzumio.yaml) or the config file itself.
        dir: PathBuf,
        /// The activation's id, or any unique beginning of it (with or without `act_`).
        activation: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Print the project's events (newest last); with -f, keep printing new ones as they
    /// happen, whoever writes them (a running `suzumio run`, another command).
    Logs {
        /// Project directory (holding suzumio.yaml) or the config file itself.
        dir: PathBuf,
        /// Follow: print new events as they are recorded, until Ctrl-C.
        #[arg(short = 'f', long)]
        follow: bool,
        /// Only events about this agent.
        #[arg(long)]
        agent: Option<String>,
        /// Only events of this type, or under it (`tool_call` for tool_call.started and
        /// tool_call.finished).
        #[arg(long = "type", value_name = "TYPE")]
        kind: Option<String>,
        /// How many of the newest to print first (at most 1000).
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// One JSON object per line (JSON Lines) instead of text.
        #[arg(long)]
        json: bool,
    },
    /// An agent's history as its model replays it: prompts, replies, tool results, signals.
    History {
        /// Project directory (holding suzumio.yaml) or the config file itself.
        dir: PathBuf,
        /// The agent.
        agent: String,
        /// How many of the newest entries (oldest first).
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Cancel the agent's running activation. A `suzumio run` serving the project (in another
    /// terminal) stops it within a second; its signals count as handled.
    Cancel {
        /// Project directory (holding suzumio.yaml) or the config file itself.
        dir: PathBuf,
        /// The agent.
        agent: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Wake an agent now: a P1 message from the user (an idle agent starts an activation at
    /// once; a busy one gets it at its next tool call).
    Wake {
        /// Project directory (holding suzumio.yaml) or the config file itself.
        dir: PathBuf,
        /// The agent.
        agent: String,
        /// What to tell it (default: to check where its work stands and continue).
        body: Vec<String>,
        /// Print the message and signal ids as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Resume agents a budget or the wake-loop guard paused: their pending signals are
    /// delivered again (a running `suzumio run` picks this up at its next tick).
    Resume {
        /// Project directory (holding suzumio.yaml) or the config file itself.
        dir: PathBuf,
        /// The agents to resume.
        #[arg(required = true, num_args = 1..)]
        agents: Vec<String>,
    },
    /// Approve the submitted report: the project becomes completed.
    Approve {
        /// Project directory (holding suzumio.yaml) or the config file itself.
        dir: PathBuf,
    },
    /// Approval requests of tool calls that wait for a person (`requiresApproval`, `ask` rules):
    /// list them, allow or deny them, and list or forget remembered decisions.
    Approvals {
        #[command(subcommand)]
        command: ApprovalsCommand,
    },
    /// Questions agents asked the user (`ask_user`) that wait for an answer (or all of them).
    Questions {
        /// Project directory (holding suzumio.yaml) or the config file itself.
        dir: PathBuf,
        /// Answered and closed questions too (the newest 200).
        #[arg(long)]
        all: bool,
        #[arg(long)]
        json: bool,
    },
    /// Answer an agent's question: its activation continues with your answer.
    Answer {
        /// Project directory (holding suzumio.yaml) or the config file itself.
        dir: PathBuf,
        /// The question's id (`suzumio questions`), or any unique prefix of it.
        id: String,
        /// The answer (with choices: one of them, exactly as listed).
        text: Option<String>,
        /// The number of the choice, as `suzumio questions` lists it (1 is the first).
        #[arg(long)]
        choice: Option<u32>,
    },
    /// Permission decisions: why a call would be allowed, asked or denied.
    Permissions {
        #[command(subcommand)]
        command: PermissionsCommand,
    },
    /// The permission audit trail (.suzumio/audit/permissions.jsonl), oldest first.
    Audit {
        /// Project directory (holding suzumio.yaml) or the config file itself.
        dir: PathBuf,
        /// Only this agent's entries.
        #[arg(long)]
        agent: Option<String>,
        /// Only entries since a time (RFC 3339) or for a duration back (2h, 30m).
        #[arg(long)]
        since: Option<String>,
        /// Print the entries as JSON lines.
        #[arg(long)]
        json: bool,
    },
    /// Serve one agent's allowed tools (and its artifacts, as resources) over MCP on stdio.
    Mcp {
        /// Project directory (holding suzumio.yaml) or the config file itself.
        dir: PathBuf,
        /// The agent the tools run as.
        #[arg(long)]
        agent: String,
        /// Run the runner as a Docker container (default) or a local process.
        #[arg(long, value_enum)]
        backend: Option<BackendArg>,
    },
    /// Tools, run by hand.
    Tool {
        #[command(subcommand)]
        command: ToolCommand,
    },
    /// Mark the project running, so the scheduler delivers its signals.
    Start {
        /// Project directory (holding suzumio.yaml) or the config file itself.
        dir: PathBuf,
    },
    /// Mark the project stopped: nothing is scheduled until it is started again.
    Stop {
        /// Project directory (holding suzumio.yaml) or the config file itself.
        dir: PathBuf,
    },
    /// Run one scheduler tick (delivery, toolpack hooks, nudges, monitors) and show what it did.
    Tick {
        /// Project directory (holding suzumio.yaml) or the config file itself.
        dir: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// List signals, newest first.
    Signals {
        /// Project directory (holding suzumio.yaml) or the config file itself.
        dir: PathBuf,
        /// Only signals targeted at this agent.
        #[arg(long)]
        agent: Option<String>,
        /// Only signals with this status.
        #[arg(long, value_enum)]
        status: Option<SignalStatusArg>,
        /// How many (at most 500).
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Runner images.
    Image {
        #[command(subcommand)]
        command: ImageCommand,
    },
    /// Invoke a toolpack's WebUI entry against the project state and print the result.
    Ui {
        /// Project directory (holding suzumio.yaml) or the config file itself.
        dir: PathBuf,
        /// The entry as <toolpack>/<entry>, e.g. core/project.stats.
        target: String,
        /// The input as a JSON object (default {}).
        input: Option<String>,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum ToolsCommand {
    /// Switch tools (or whole groups, `group:NAME`) of the agent's allowlist off while the
    /// project runs: gone from its next model request, and refused if called anyway.
    Off {
        /// Project directory (holding suzumio.yaml) or the config file itself.
        dir: PathBuf,
        /// The agent whose tools are switched.
        agent: String,
        /// Tools (`web.fetch`) or groups (`group:web`, the catalog's group).
        #[arg(required = true)]
        names: Vec<String>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Switch tools or groups back on (never past the agent's allowlist).
    On {
        /// Project directory (holding suzumio.yaml) or the config file itself.
        dir: PathBuf,
        /// The agent whose tools are switched.
        agent: String,
        /// Tools (`web.fetch`) or groups (`group:web`, the catalog's group).
        #[arg(required = true)]
        names: Vec<String>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum ToolCommand {
    /// Run one tool as an agent through the real path (allowlist, schema, the agent's runner or
    /// the controller) and print its result. Exit 1 when the tool fails.
    Call {
        /// Project directory (holding suzumio.yaml) or the config file itself.
        dir: PathBuf,
        /// The agent the tool runs as.
        #[arg(long)]
        agent: String,
        /// Tool name, e.g. shell.exec.
        tool: String,
        /// The input as a JSON object (default {}).
        input: Option<String>,
        /// Run the runner as a Docker container (default) or a local process.
        #[arg(long, value_enum)]
        backend: Option<BackendArg>,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum ApprovalsCommand {
    /// Pending requests: tool, agent, input, reason, risk.
    List {
        /// Project directory (holding suzumio.yaml) or the config file itself.
        dir: PathBuf,
        /// Decided requests too (the newest 200).
        #[arg(long)]
        all: bool,
        #[arg(long)]
        json: bool,
    },
    /// Allow a request: exactly the stored call runs and the activation continues.
    Allow {
        #[command(flatten)]
        decision: ApprovalDecisionArgs,
    },
    /// Deny a request: the model gets the denial with the reason and your feedback.
    Deny {
        #[command(flatten)]
        decision: ApprovalDecisionArgs,
    },
    /// Remembered decisions, with who made them, when, and from which request.
    Rules {
        /// Project directory (holding suzumio.yaml) or the config file itself.
        dir: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Delete a remembered decision: its tool asks again.
    Forget {
        /// Project directory (holding suzumio.yaml) or the config file itself.
        dir: PathBuf,
        /// The rule's id (`suzumio approvals rules`).
        rule: String,
    },
}

#[derive(clap::Args)]
struct ApprovalDecisionArgs {
    /// Project directory (holding suzumio.yaml) or the config file itself.
    dir: PathBuf,
    /// The request's id (`suzumio approvals list`), or any unique prefix of it.
    id: String,
    /// Also decide later calls of this tool the same way: for the rest of the activation, for
    /// the agent, or for every agent of the project.
    #[arg(long, value_enum)]
    remember: Option<RememberArg>,
    /// What the model is told along with the decision.
    #[arg(long)]
    feedback: Option<String>,
    /// Also decide every other pending request of the same activation (its turn's other calls).
    #[arg(long)]
    all_of_activation: bool,
}

/// `approvals --remember`.
#[derive(Clone, Copy, ValueEnum)]
enum RememberArg {
    Activation,
    Agent,
    Project,
}

impl From<RememberArg> for suzumio::store::RememberScope {
    fn from(r: RememberArg) -> Self {
        match r {
            RememberArg::Activation => suzumio::store::RememberScope::Activation,
            RememberArg::Agent => suzumio::store::RememberScope::Agent,
            RememberArg::Project => suzumio::store::RememberScope::Project,
        }
    }
}

#[derive(Subcommand)]
enum PermissionsCommand {
    /// Every rule that can decide an agent's calls, with its source (suzumio.yaml, live,
    /// remembered), and each agent's permission mode in force.
    List {
        /// Project directory (holding suzumio.yaml) or the config file itself.
        dir: PathBuf,
        /// Only what applies to this agent.
        #[arg(long)]
        agent: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Add a live rule: it decides from the agent's next tool call (a running `suzumio run`
    /// reads it at each call), beside suzumio.yaml's rules (deny beats ask beats allow; the
    /// allowlist is checked first). Prints the new rule, with its id.
    Add {
        /// Project directory (holding suzumio.yaml) or the config file itself.
        dir: PathBuf,
        /// Only for this agent (default: every agent).
        #[arg(long)]
        agent: Option<String>,
        /// The tool pattern: a tool (file.write), a namespace (file.*) or *.
        tool: String,
        /// allow, ask or deny.
        decision: String,
        /// A path glob the call's paths must match (file and git tools; repeatable).
        #[arg(long = "paths", value_name = "GLOB")]
        paths: Vec<String>,
        /// A command pattern (`rm *`) for shell lines (repeatable).
        #[arg(long = "commands", value_name = "PATTERN")]
        commands: Vec<String>,
        /// A host pattern (example.com, *.example.com) for web.fetch (repeatable).
        #[arg(long = "hosts", value_name = "PATTERN")]
        hosts: Vec<String>,
        /// Why: what the model reads when the rule denies or asks.
        #[arg(long)]
        reason: Option<String>,
        /// Print the rule as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove a live rule (its id from `permissions list`): from the next tool call, calls are
    /// decided as before it was added.
    Rm {
        /// Project directory (holding suzumio.yaml) or the config file itself.
        dir: PathBuf,
        /// The live rule's id.
        rule: String,
    },
    /// Switch an agent's permission mode from its next tool call, or take it back to
    /// suzumio.yaml's with `config` (or `--reset`).
    Mode {
        /// Project directory (holding suzumio.yaml) or the config file itself.
        dir: PathBuf,
        /// The agent.
        agent: String,
        /// default, auto, full-access, or config.
        #[arg(required_unless_present = "reset")]
        mode: Option<String>,
        /// Back to the mode suzumio.yaml gives the agent.
        #[arg(long, conflicts_with = "mode")]
        reset: bool,
    },
    /// The decision a call would get (rules, mode, annotations), its source, reason and risk.
    Explain {
        /// Project directory (holding suzumio.yaml) or the config file itself.
        dir: PathBuf,
        /// The agent making the call.
        agent: String,
        /// Tool name, e.g. shell.exec.
        tool: String,
        /// The input as a JSON object (default {}).
        input: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum ImageCommand {
    /// Build a runner image offline, if missing: the minimal one (busybox-static + the runner
    /// user) or, with `--base debian`, a Debian one (bash, coreutils, git, python3, nodejs,
    /// ripgrep, ca-certificates) made by mmdebstrap from the machine's Debian sources.
    Build {
        /// Which image: minimal (default, suzumio-runner:minimal) or debian (suzumio-runner:debian).
        #[arg(long, value_enum, default_value_t = ImageBase::Minimal)]
        base: ImageBase,
        /// More Debian packages for the debian image (comma-separated or repeated).
        #[arg(long, value_delimiter = ',')]
        packages: Vec<String>,
        /// An MCP server from the npm registry for the debian image (`name` or `name@version`;
        /// repeatable): installed at build time into /opt/mcp, its command in /opt/mcp/bin.
        #[arg(long, value_name = "PACKAGE")]
        npm: Vec<String>,
        /// An MCP server from PyPI for the debian image (`name` or `name==version`; repeatable):
        /// installed at build time into /opt/mcp/python, a command per console script in /opt/mcp/bin.
        #[arg(long, value_name = "REQUIREMENT")]
        pip: Vec<String>,
        /// The Debian suite (default: this machine's, e.g. bookworm).
        #[arg(long)]
        suite: Option<String>,
        /// The tag to build (default: suzumio-runner:<base>).
        #[arg(long)]
        tag: Option<String>,
        /// Rebuild even if the image exists.
        #[arg(long)]
        force: bool,
    },
}

#[derive(Subcommand)]
enum ToolpackCommand {
    /// Write a starter pack into a new or empty directory (its name is the pack's id): a manifest
    /// with one tool `<name>.hello`, runner.mjs, controller.mjs with a WebUI panel and action, a README.
    New {
        /// The pack directory, usually <project>/toolpacks/<name>.
        dir: PathBuf,
        /// Write into a directory that is not empty (files of the pack are overwritten).
        #[arg(long)]
        force: bool,
    },
}

/// `init --template`.
#[derive(Clone, Copy, ValueEnum)]
enum TemplateArg {
    Minimal,
    Team,
    Demo,
}

impl From<TemplateArg> for Template {
    fn from(t: TemplateArg) -> Self {
        match t {
            TemplateArg::Minimal => Template::Minimal,
            TemplateArg::Team => Template::Team,
            TemplateArg::Demo => Template::Demo,
        }
    }
}

/// `image build --base`.
#[derive(Clone, Copy, ValueEnum)]
enum ImageBase {
    Minimal,
    Debian,
}

impl From<ImageBase> for commands::image::ImageBase {
    fn from(b: ImageBase) -> Self {
        match b {
            ImageBase::Minimal => commands::image::ImageBase::Minimal,
            ImageBase::Debian => commands::image::ImageBase::Debian,
        }
    }
}

/// `--backend`. The library's enums stay free of CLI concerns; these map onto them one to one.
#[derive(Clone, Copy, ValueEnum)]
enum BackendArg {
    Docker,
    Process,
}

impl From<BackendArg> for BackendKind {
    fn from(b: BackendArg) -> Self {
        match b {
            BackendArg::Docker => BackendKind::Docker,
            BackendArg::Process => BackendKind::Process,
        }
    }
}

/// `--priority`, spelled as everywhere else (`P0`..`P3`).
#[derive(Clone, Copy, ValueEnum)]
#[value(rename_all = "verbatim")]
enum PriorityArg {
    P0,
    P1,
    P2,
    P3,
}

impl From<PriorityArg> for Priority {
    fn from(p: PriorityArg) -> Self {
        match p {
            PriorityArg::P0 => Priority::P0,
            PriorityArg::P1 => Priority::P1,
            PriorityArg::P2 => Priority::P2,
            PriorityArg::P3 => Priority::P3,
        }
    }
}

/// `run --log-format`.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

impl From<LogFormat> for commands::run::LogFormat {
    fn from(f: LogFormat) -> Self {
        match f {
            LogFormat::Text => commands::run::LogFormat::Text,
            LogFormat::Json => commands::run::LogFormat::Json,
        }
    }
}

/// `activations --status`.
#[derive(Clone, Copy, ValueEnum)]
enum ActivationStatusArg {
    Running,
    Completed,
    Failed,
    Cancelled,
}

impl From<ActivationStatusArg> for ActivationStatus {
    fn from(s: ActivationStatusArg) -> Self {
        match s {
            ActivationStatusArg::Running => ActivationStatus::Running,
            ActivationStatusArg::Completed => ActivationStatus::Completed,
            ActivationStatusArg::Failed => ActivationStatus::Failed,
            ActivationStatusArg::Cancelled => ActivationStatus::Cancelled,
        }
    }
}

/// `signals --status`.
#[derive(Clone, Copy, ValueEnum)]
enum SignalStatusArg {
    Pending,
    Delivered,
    Closed,
}

impl From<SignalStatusArg> for SignalStatus {
    fn from(s: SignalStatusArg) -> Self {
        match s {
            SignalStatusArg::Pending => SignalStatus::Pending,
            SignalStatusArg::Delivered => SignalStatus::Delivered,
            SignalStatusArg::Closed => SignalStatus::Closed,
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let verbose = matches!(cli.command, Command::Run { .. });
    let format = match cli.command {
        Command::Run { log_format, .. } => log_format,
        _ => LogFormat::Text,
    };
    // The live lines of `suzumio run` (stderr; hidden when it is not a terminal). Everything
    // written to stderr while they are up goes through it.
    let terminal = MultiProgress::new();
    init_logging(verbose, format, &terminal);
    match cli.command {
        Command::Init { dir, template, force, copy_packs } => {
            finish(init(&dir, &InitOptions { template: template.into(), force, copy_packs }))
        }
        Command::Toolpack { command: ToolpackCommand::New { dir, force } } => finish(toolpack_new(&dir, force)),
        Command::Check { dir, json, backend } => {
            block_on(
                async move { finish_json(commands::check(&dir, json, backend.map(BackendKind::from)).await, json) },
            )
        }
        Command::Tools { command: Some(ToolsCommand::Off { dir, agent, names, json }), .. } => {
            finish_json(commands::switch_tools(&dir, &agent, &names, false, json), json)
        }
        Command::Tools { command: Some(ToolsCommand::On { dir, agent, names, json }), .. } => {
            finish_json(commands::switch_tools(&dir, &agent, &names, true, json), json)
        }
        Command::Tools { command: None, dir, agent, json } => {
            let dir = dir.unwrap_or_default();
            finish_json(commands::tools(&dir, agent.as_deref(), json), json)
        }
        Command::Run { dir, host, port, token, allowed_hosts, backend, until_idle, paused, kickoff, log_format } => {
            block_on(async move {
                let backend = backend.map(BackendKind::from);
                let options = RunOptions {
                    host,
                    port,
                    token,
                    backend,
                    until_idle,
                    login_code: None,
                    allowed_hosts,
                    start: !paused,
                    kickoff,
                };
                let console = Terminal(terminal.clone());
                match commands::run::run(&dir, options, log_format.into(), console, stop_signal()).await {
                    Ok(served) if served.failed => ExitCode::from(1),
                    Ok(_) => ExitCode::SUCCESS,
                    Err(e) => terminal.suspend(|| finish(Err(e))),
                }
            })
        }
        Command::Ui { dir, target, input, json } => {
            block_on(async move { finish_json(commands::ui(&dir, &target, input.as_deref(), json).await, json) })
        }
        Command::Image { command: ImageCommand::Build { base, packages, npm, pip, suite, tag, force } } => {
            let mcp = suzumio::backend::McpServers { npm, pip };
            let request = ImageBuild { base: base.into(), packages, mcp, suite, tag, force };
            block_on(async move { finish(commands::image::build(request).await) })
        }
        Command::Tool { command: ToolCommand::Call { dir, agent, tool, input, backend, json } } => {
            block_on(async move {
                let kind = backend.map(BackendKind::from);
                finish_json(commands::tool_call(&dir, &agent, &tool, input.as_deref(), kind, json).await, json)
            })
        }
        Command::Mcp { dir, agent, backend } => block_on(async move {
            let kind = backend.map(BackendKind::from);
            finish(commands::mcp::serve(&dir, &agent, kind).await.map(|()| String::new().into()))
        }),
        Command::Send { dir, recipient, priority, body, json } => {
            finish_json(commands::send(&dir, &recipient, priority.into(), &body.join(" "), json), json)
        }
        Command::Status { dir, json } => finish_json(commands::status(&dir, json), json),
        Command::Activations { dir, agent, status, limit, json } => finish_json(
            commands::activations(&dir, agent.as_deref(), status.map(ActivationStatus::from), limit, json),
            json,
        ),
        Command::Show { dir, activation, json } => finish_json(commands::show(&dir, &activation, json), json),
        Command::History { dir, agent, limit, json } => finish_json(commands::history(&dir, &agent, limit, json), json),
        Command::Cancel { dir, agent, json } => finish_json(commands::cancel(&dir, &agent, json), json),
        Command::Wake { dir, agent, body, json } => {
            let body = body.join(" ");
            finish_json(commands::wake(&dir, &agent, Some(&body), json), json)
        }
        Command::Logs { dir, follow, agent, kind, limit, json } => {
            let filter = commands::LogFilter { agent, kind, limit, json };
            if !follow {
                return finish_json(commands::logs(&dir, &filter), json);
            }
            block_on(async move {
                let stop = async {
                    let _ = stop_signal().await;
                };
                finish_json(commands::follow_logs(&dir, &filter, emit, stop).await.map(|()| String::new().into()), json)
            })
        }
        Command::Approve { dir } => finish(commands::approve(&dir)),
        Command::Approvals { command } => finish(match command {
            ApprovalsCommand::List { dir, all, json } => commands::approvals::list(&dir, all, json),
            ApprovalsCommand::Allow { decision: d } => resolve_approval(d, true),
            ApprovalsCommand::Deny { decision: d } => resolve_approval(d, false),
            ApprovalsCommand::Rules { dir, json } => commands::approvals::rules(&dir, json),
            ApprovalsCommand::Forget { dir, rule } => commands::approvals::forget(&dir, &rule),
        }),
        Command::Permissions { command: PermissionsCommand::List { dir, agent, json } } => {
            finish(commands::permissions_list(&dir, agent.as_deref(), json))
        }
        Command::Permissions {
            command: PermissionsCommand::Add { dir, agent, tool, decision, paths, commands, hosts, reason, json },
        } => {
            let some = |v: Vec<String>| (!v.is_empty()).then_some(v);
            let spec = suzumio::permissions::live::RuleSpec {
                agent,
                tool,
                decision,
                paths: some(paths),
                commands: some(commands),
                hosts: some(hosts),
                reason,
            };
            finish(commands::permissions_add(&dir, spec, json))
        }
        Command::Permissions { command: PermissionsCommand::Rm { dir, rule } } => {
            finish(commands::permissions_rm(&dir, &rule))
        }
        Command::Permissions { command: PermissionsCommand::Mode { dir, agent, mode, reset: _ } } => {
            finish(commands::permissions_mode(&dir, &agent, mode.as_deref()))
        }
        Command::Questions { dir, all, json } => finish(commands::questions::list(&dir, all, json)),
        Command::Answer { dir, id, text, choice } => {
            finish(commands::questions::answer(&dir, &id, text.as_deref(), choice))
        }
        Command::Permissions { command: PermissionsCommand::Explain { dir, agent, tool, input, json } } => {
            finish(commands::permissions_explain(&dir, &agent, &tool, input.as_deref(), json))
        }
        Command::Audit { dir, agent, since, json } => {
            finish(commands::audit(&dir, agent.as_deref(), since.as_deref(), json))
        }
        Command::Resume { dir, agents } => finish(commands::resume(&dir, &agents)),
        Command::Start { dir } => finish(commands::set_status(&dir, ProjectStatus::Running)),
        Command::Stop { dir } => finish(commands::set_status(&dir, ProjectStatus::Stopped)),
        Command::Tick { dir, json } => block_on(async move { finish_json(commands::tick(&dir, json).await, json) }),
        Command::Signals { dir, agent, status, limit, json } => {
            finish_json(commands::signals(&dir, agent.as_deref(), status.map(SignalStatus::from), limit, json), json)
        }
    }
}

/// The terminal of `suzumio run`: stdout lines, and stderr notes written around the live lines.
#[derive(Clone)]
struct Terminal(MultiProgress);

impl commands::run::Console for Terminal {
    fn line(&self, text: &str) {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{text}");
        let _ = out.flush();
    }

    fn note(&self, text: &str) {
        self.0.suspend(|| eprintln!("{text}"));
    }

    fn terminal(&self) -> &MultiProgress {
        &self.0
    }
}

/// One line of `logs -f` on stdout. A closed pipe (`| head`) ends the command like Ctrl-C would.
fn emit(line: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if writeln!(out, "{line}").and_then(|_| out.flush()).is_err() {
        std::process::exit(0);
    }
}

/// [`finish`] for a command given `--json`: a failure also prints its JSON error object on
/// stdout (`{"error": {"message", "kind", "exitCode"}}`), so a script reading stdout always
/// gets JSON.
fn finish_json(result: Result<Output, CliError>, json: bool) -> ExitCode {
    if json && let Err(e) = &result {
        println!("{}", e.to_json().trim_end());
    }
    finish(result)
}

/// `approvals allow|deny`.
fn resolve_approval(d: ApprovalDecisionArgs, allow: bool) -> Result<Output, CliError> {
    let remember = d.remember.map(Into::into);
    commands::approvals::resolve(&d.dir, &d.id, allow, remember, d.feedback.as_deref(), d.all_of_activation)
}

/// Print a command's warnings and output, or its error; exit with the error's code.
fn finish(result: Result<Output, CliError>) -> ExitCode {
    match result {
        Ok(out) => {
            for w in sorted(&out.warnings) {
                eprintln!("warning: {w}");
            }
            print!("{}", out.stdout);
            ExitCode::SUCCESS
        }
        Err(e) => {
            if let CliError::Invalid(invalid) = &e {
                for w in sorted(&invalid.0.warnings) {
                    eprintln!("warning: {w}");
                }
            }
            if e.is_rendered() {
                eprintln!("{e}");
            } else {
                eprintln!("error: {e}");
            }
            if let Some(hint) = e.hint() {
                eprintln!("{hint}");
            }
            ExitCode::from(e.exit_code())
        }
    }
}

fn init_logging(verbose: bool, format: LogFormat, terminal: &MultiProgress) {
    let default = if verbose { "info" } else { "warn" };
    let asked = std::env::var("SUZUMIO_LOG").ok();
    let mut filter = tracing_subscriber::EnvFilter::try_from_env("SUZUMIO_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    // rmcp's own info lines name a stateless client as rmcp itself, once per request; the MCP
    // server logs each client as it names itself. Named in SUZUMIO_LOG, rmcp logs as asked.
    if !asked.is_some_and(|a| a.contains("rmcp"))
        && let Ok(quiet) = "rmcp=warn".parse()
    {
        filter = filter.add_directive(quiet);
    }
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let logs =
        tracing_subscriber::fmt().with_env_filter(filter).with_writer(suzumio::progress::LogWriter::new(terminal));
    match format {
        LogFormat::Text => logs.with_ansi(ansi).with_target(false).init(),
        // One object per line: `timestamp`, `level`, `fields` (`message` and the event's own
        // fields, e.g. `agent`, `activation`), `target`.
        LogFormat::Json => logs.json().with_ansi(false).init(),
    }
}

/// Ctrl-C (SIGINT) or SIGTERM, whichever comes first: both stop `suzumio run` the same way.
async fn stop_signal() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => tokio::select! {
            _ = tokio::signal::ctrl_c() => "interrupted",
            _ = term.recv() => "terminated",
        },
        Err(e) => {
            tracing::warn!("cannot watch for SIGTERM: {e}");
            let _ = tokio::signal::ctrl_c().await;
            "interrupted"
        }
    }
}

fn block_on(work: impl std::future::Future<Output = ExitCode>) -> ExitCode {
    match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt.block_on(work),
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            ExitCode::from(1)
        }
    }
}
