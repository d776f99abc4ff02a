//! The `suzumio` CLI: parse arguments, call the library, map the outcome to an exit code
//! (0 ok, 1 failure at run time, 2 invalid input or config).

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use indicatif::MultiProgress;
use suzumio::commands::{self, CliError, Output};
use suzumio::config::diag::sorted;
use suzumio::config::{BackendKind, Priority};
use suzumio::controller::{self, RunOptions};
use suzumio::store::{ProjectStatus, SignalStatus};
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
    },
    /// The project's status, agents, pending work and report.
    Status {
        /// Project directory (holding suzumio.yaml) or the config file itself.
        dir: PathBuf,
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
    /// The request's id (`suzumio approvals list`).
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

/// `image build --base`.
#[derive(Clone, Copy, ValueEnum)]
enum ImageBase {
    Minimal,
    Debian,
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
    // The live lines of `suzumio run` (stderr; hidden when it is not a terminal). Everything
    // written to stderr while they are up goes through it.
    let terminal = MultiProgress::new();
    init_logging(verbose, &terminal);
    match cli.command {
        Command::Check { dir } => block_on(async move { finish(commands::check(&dir).await) }),
        Command::Tools { dir, agent, json } => finish(commands::tools(&dir, agent.as_deref(), json)),
        Command::Run { dir, host, port, token, allowed_hosts, backend, until_idle, paused } => block_on(async move {
            let login_code = token.as_ref().map(|_| suzumio::store::new_token());
            let link_code = login_code.clone();
            let backend = backend.map(BackendKind::from);
            let options =
                RunOptions { host, port, token, backend, until_idle, login_code, allowed_hosts, start: !paused };
            let live = terminal.clone();
            let announce = move |tools: &suzumio::support::ToolHost, addr: std::net::SocketAddr| {
                let status = tools.store.project().map(|p| p.status);
                let note = match status {
                    Ok(suzumio::store::ProjectStatus::Running) => String::new(),
                    Ok(suzumio::store::ProjectStatus::Stopped) => {
                        " (stopped: no agent runs until `suzumio start` or Start in the WebUI)".to_string()
                    }
                    Ok(other) => format!(" ({}: no agent runs until it is started)", other.as_str()),
                    Err(e) => format!(" (status unknown: {e})"),
                };
                println!("suzumio: project {}{note} is served at http://{addr} (Ctrl-C to stop)", tools.name());
                if let Some(code) = &link_code {
                    println!("suzumio: WebUI login link (works once): http://{addr}/login/{code}");
                }
                show_progress(tools, &live);
            };
            let stopping = terminal.clone();
            let shutdown = async move {
                let signal = stop_signal().await;
                stopping.suspend(|| eprintln!("suzumio: {signal}: shutting down"));
            };
            match controller::run(&dir, options, announce, shutdown).await {
                Ok(outcome) if !outcome.failed_activations.is_empty() => {
                    terminal.suspend(|| {
                        eprintln!(
                            "suzumio: {} activation(s) failed: {}",
                            outcome.failed_activations.len(),
                            outcome.failed_activations.join(", ")
                        )
                    });
                    ExitCode::from(1)
                }
                Ok(_) => ExitCode::SUCCESS,
                Err(e) => terminal.suspend(|| finish(Err(e.into()))),
            }
        }),
        Command::Ui { dir, target, input, json } => {
            block_on(async move { finish(commands::ui(&dir, &target, input.as_deref(), json).await) })
        }
        Command::Image { command: ImageCommand::Build { base, packages, suite, tag, force } } => block_on(async move {
            let built = match base {
                ImageBase::Minimal if !packages.is_empty() || suite.is_some() || tag.is_some() => {
                    Err(CliError::Input("--packages, --suite and --tag apply to --base debian only".to_string()))
                }
                ImageBase::Minimal => suzumio::backend::build_minimal_image(force)
                    .await
                    .map(|info| format!("{info}\n").into())
                    .map_err(CliError::from),
                ImageBase::Debian => {
                    let build = suzumio::backend::DebianBuild {
                        tag: tag.unwrap_or_else(|| suzumio::backend::DEBIAN_IMAGE.to_string()),
                        suite,
                        packages,
                        force,
                    };
                    suzumio::backend::build_debian_image(&build).await.map(|image| format!("{image}\n").into()).map_err(
                        |e| match e {
                            e @ suzumio::backend::BackendError::InvalidPackage { .. } => CliError::Input(e.to_string()),
                            e => CliError::from(e),
                        },
                    )
                }
            };
            finish(built)
        }),
        Command::Tool { command: ToolCommand::Call { dir, agent, tool, input, backend, json } } => {
            block_on(async move {
                let kind = backend.map(BackendKind::from);
                finish(commands::tool_call(&dir, &agent, &tool, input.as_deref(), kind, json).await)
            })
        }
        Command::Send { dir, recipient, priority, body } => {
            finish(commands::send(&dir, &recipient, priority.into(), &body.join(" ")))
        }
        Command::Status { dir } => finish(commands::status(&dir)),
        Command::Approve { dir } => finish(commands::approve(&dir)),
        Command::Approvals { command } => finish(match command {
            ApprovalsCommand::List { dir, all, json } => commands::approvals::list(&dir, all, json),
            ApprovalsCommand::Allow { decision: d } => resolve_approval(d, true),
            ApprovalsCommand::Deny { decision: d } => resolve_approval(d, false),
            ApprovalsCommand::Rules { dir, json } => commands::approvals::rules(&dir, json),
            ApprovalsCommand::Forget { dir, rule } => commands::approvals::forget(&dir, &rule),
        }),
        Command::Permissions { command: PermissionsCommand::Explain { dir, agent, tool, input, json } } => {
            finish(commands::permissions_explain(&dir, &agent, &tool, input.as_deref(), json))
        }
        Command::Audit { dir, agent, since, json } => {
            finish(commands::audit(&dir, agent.as_deref(), since.as_deref(), json))
        }
        Command::Resume { dir, agents } => finish(commands::resume(&dir, &agents)),
        Command::Start { dir } => finish(commands::set_status(&dir, ProjectStatus::Running)),
        Command::Stop { dir } => finish(commands::set_status(&dir, ProjectStatus::Stopped)),
        Command::Tick { dir } => block_on(async move { finish(commands::tick(&dir).await) }),
        Command::Signals { dir, agent, status, limit, json } => {
            finish(commands::signals(&dir, agent.as_deref(), status.map(SignalStatus::from), limit, json))
        }
    }
}

/// Live lines per agent on a terminal's stderr; plain lines (one per event) on stdout when the
/// live lines are hidden or stdout goes elsewhere.
fn show_progress(tools: &suzumio::support::ToolHost, terminal: &MultiProgress) {
    use std::io::{IsTerminal, Write};
    let mut events = tools.store.subscribe();
    let agents: Vec<String> = tools.project.config.agents.iter().map(|a| a.id.clone()).collect();
    let plain = terminal.is_hidden() || !std::io::stdout().is_terminal();
    let mut view = suzumio::progress::LiveView::new(terminal, &agents, plain);
    tokio::spawn(async move {
        loop {
            let event = match events.recv().await {
                Ok(event) => event,
                // A burst outran us: the counts miss those events, but the view goes on.
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
            };
            if let Some(line) = view.show(&event) {
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{line}");
                let _ = out.flush();
            }
        }
    });
}

/// Print a command's warnings and output, or its error; exit with the error's code.
fn resolve_approval(d: ApprovalDecisionArgs, allow: bool) -> Result<Output, CliError> {
    let remember = d.remember.map(Into::into);
    commands::approvals::resolve(&d.dir, &d.id, allow, remember, d.feedback.as_deref(), d.all_of_activation)
}

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
            ExitCode::from(e.exit_code())
        }
    }
}

fn init_logging(verbose: bool, terminal: &MultiProgress) {
    let default = if verbose { "info" } else { "warn" };
    let filter = tracing_subscriber::EnvFilter::try_from_env("SUZUMIO_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(suzumio::progress::LogWriter::new(terminal))
        .with_ansi(ansi)
        .with_target(false)
        .init();
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
