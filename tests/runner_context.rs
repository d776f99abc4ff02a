//! A pack that does real work in its agent's container, on the real Docker engine with the
//! minimal image (fixture `workpack`): its `runner.mjs` writes a file with `context.fs`, runs
//! `sh -c` with `context.exec`, hashes with `node:crypto` (checked against the host's
//! `sha256sum`), and its processes get the agent's configured environment and nothing of the
//! controller's: a secret planted in the controller's environment (here the provider key the
//! project's config reads from it) is neither in `context.env` nor in a process's `env`.
//!
//! The only test of this binary: it sets the controller's environment before any thread starts.

mod support;

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::{Value, json};
use suzumio::config::BackendKind;

const SECRET: &str = "sk-controller-secret-5d1f2a";

fn sha256sum(text: &str) -> String {
    let mut child = Command::new("sha256sum").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8(out.stdout).unwrap().split_whitespace().next().unwrap().to_string()
}

#[test]
fn a_runner_pack_works_in_its_container_without_the_controllers_secrets() {
    // SAFETY: this is the binary's only test and no thread has been started yet.
    unsafe { std::env::set_var("WORKPACK_CONTROLLER_SECRET", SECRET) };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let c = support::containers::start_fixture("workpack", "ctx", None, BackendKind::Docker).await;
        let planted = c.tools.project.config.models.providers.iter().any(|p| p.api_key.as_deref() == Some(SECRET));
        assert!(planted, "the controller's config holds the planted secret");

        let text = "written by context.fs in the container\n";
        let out = c.call("a", "work.run", json!({"name": "hello", "text": text})).await.unwrap();
        let result: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(result["file"], "/workspace/out/hello.txt");
        assert_eq!(result["exitCode"], 0, "{result}");
        assert_eq!(result["stdout"], format!("hello.txt\n{}\n", text.len()));
        assert_eq!(result["digest"], sha256sum(text));
        assert_eq!(
            c.sh("a", "cat /workspace/out/hello.txt").await,
            format!("$ cat /workspace/out/hello.txt\n[stdout]\n{}", text.trim_end())
        );

        let out = c.call("a", "work.env", json!({})).await.unwrap();
        let result: Value = serde_json::from_str(&out).unwrap();
        let process_env = result["processEnv"].as_str().unwrap();
        assert!(process_env.contains("AGENT_SETTING=configured-for-a\n"), "{process_env}");
        assert!(process_env.contains("FROM_CALL=yes\n"), "{process_env}");
        assert!(process_env.contains("SUZUMIO_AGENT=a\n"), "{process_env}");
        assert!(!process_env.contains(SECRET), "the controller's secret reached a process: {process_env}");
        assert!(!process_env.contains("SUZUMIO_TOKEN"), "{process_env}");
        let context_env = result["contextEnv"].to_string();
        assert_eq!(result["contextEnv"]["AGENT_SETTING"], "configured-for-a");
        assert!(!context_env.contains(SECRET) && !context_env.contains("SUZUMIO_TOKEN"), "{context_env}");
    });
}
