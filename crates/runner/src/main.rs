//! `suzumio-runner`: the process inside each agent's container. It first makes itself
//! non-dumpable ([`runner::harden`]), reads its settings from the environment (optional
//! `SUZUMIO_SOCKET`, `SUZUMIO_WORKSPACE`, `SUZUMIO_ARTIFACTS`, `SUZUMIO_MNT`, `SUZUMIO_LOG` for
//! the log filter, and `SUZUMIO_TOKEN` when there is no token file next to the socket), logs to
//! stderr and serves the controller until it says `shutdown`, closes the socket, or
//! SIGTERM/SIGINT arrives.
//!
//! Exit codes: 0 stopped cleanly, 1 failure at run time (no socket, refused hello, lost
//! connection), 2 bad arguments or environment.

use std::process::ExitCode;

use suzumio_runner::{self as runner, RunnerConfig};
use tokio::signal::unix::{SignalKind, signal};

const USAGE: &str = "\
usage: suzumio-runner [--version]

Runs inside an agent's container and serves the suzumio controller over its Unix socket.
Environment:
  SUZUMIO_SOCKET     control socket (default /run/suzumio/control.sock); the one-time token is
                     read from `token` in the same directory
  SUZUMIO_TOKEN      the token, for a runner started by hand (instead of the file)
  SUZUMIO_WORKSPACE  directory behind /workspace (default /workspace)
  SUZUMIO_ARTIFACTS  directory behind /artifacts (default /artifacts)
  SUZUMIO_MNT        directory behind /mnt (default /mnt)
  SUZUMIO_LOG        log filter (default info)";

fn main() -> ExitCode {
    // Before anything reads the token: tools run as the same user and must not read it back.
    if let Err(e) = runner::harden() {
        eprintln!("suzumio-runner: cannot make the process non-dumpable (PR_SET_DUMPABLE): {e}");
        return ExitCode::FAILURE;
    }
    match std::env::args().nth(1).as_deref() {
        None => {}
        Some("--version" | "-V") => {
            println!("suzumio-runner {}", suzumio_core::VERSION);
            return ExitCode::SUCCESS;
        }
        Some("--help" | "-h") => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Some(other) => {
            eprintln!("suzumio-runner: unexpected argument {other}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    }
    let filter = tracing_subscriber::EnvFilter::try_from_env("SUZUMIO_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colour only for a terminal: the process backend's runner writes into the controller's
    // stderr, often a file or a pipe, and a container's into `docker logs`.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt().with_writer(std::io::stderr).with_env_filter(filter).with_ansi(ansi).init();

    let config = match RunnerConfig::from_env(|name| std::env::var(name).ok()) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("suzumio-runner: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("suzumio-runner: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        // Before any command runs: what a command starts stays under the runner.
        runner::reaper::start();
        let stop = async {
            match (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) {
                (Ok(mut term), Ok(mut int)) => {
                    tokio::select! {
                        _ = term.recv() => {}
                        _ = int.recv() => {}
                    }
                    tracing::info!("stopping on a signal");
                }
                _ => std::future::pending().await,
            }
        };
        runner::run_until(config, stop).await
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("suzumio-runner: {e}");
            ExitCode::FAILURE
        }
    }
}
