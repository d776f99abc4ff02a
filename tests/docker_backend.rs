//! The Docker backend against the real engine: the offline minimal image, the hardened container
//! of each agent (checked from inside by a busybox probe standing in for the runner), the mount
//! table, stale-container sweeping, exit monitoring (kill, OOM) and recreation.
//!
//! These tests need a Docker engine. When none answers they fail with the reason and the set-up
//! hint; they never skip.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use suzumio::backend::{
    AGENT_LABEL, BackendError, ContainerSpec, DockerBackend, IMAGE_KIND_LABEL, MountSpec, PROJECT_LABEL, ROOT_LABEL,
    RunnerBackend, SPEC_LABEL, ensure_minimal_image, rebuild_minimal_image,
};
use suzumio::config::DEFAULT_IMAGE;
use suzumio::config::load::ProcessEnv;
use suzumio::project::Project;

const SECRET: &str = "sk-suzumio-test-secret";
const TOKEN: &str = "tok-0123456789";

// ---------------------------------------------------------------------------------------------
// harness

static IMAGE_READY: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();

/// A connected backend with the default image present; panics (fails the test) without an engine.
async fn backend() -> DockerBackend {
    let backend = DockerBackend::connect().await.unwrap_or_else(|e| {
        panic!(
            "this test needs a Docker engine and none answered: {e}\n(install and start Docker with scripts/setup.sh)"
        )
    });
    IMAGE_READY
        .get_or_init(|| async {
            ensure_minimal_image(&backend, DEFAULT_IMAGE).await.expect("the minimal image builds");
        })
        .await;
    backend
}

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A project directory in /tmp with two agents and two local packs, removed (with every
/// container labelled with its root) when dropped, also when the test fails.
struct TestProject {
    root: PathBuf,
    name: String,
}

impl TestProject {
    fn new(tag: &str, backend_yaml: &str) -> TestProject {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let name = format!("bt-{}-{n}-{tag}", std::process::id());
        let root = std::env::temp_dir().join(format!("suzumio-{name}"));
        let _ = std::fs::remove_dir_all(&root);
        for pack in ["alpha", "beta"] {
            let dir = root.join("toolpacks").join(pack);
            std::fs::create_dir_all(&dir).unwrap();
            let manifest = format!(
                r#"{{"id":"{pack}","tools":[{{"name":"{pack}.echo","description":"Echo.","inputSchema":{{"type":"object"}}}}]}}"#
            );
            std::fs::write(dir.join("suzumio.toolpack.json"), manifest).unwrap();
            std::fs::write(
                dir.join("runner.mjs"),
                "export function createRunnerToolpack() { return { tools: {} }; }\n",
            )
            .unwrap();
            std::fs::write(dir.join("controller.mjs"), "export function createControllerToolpack() { return {}; }\n")
                .unwrap();
        }
        std::fs::create_dir_all(root.join("data")).unwrap();
        std::fs::write(root.join("data/hello.txt"), "hello from the host\n").unwrap();
        std::fs::create_dir_all(root.join("scratch")).unwrap();
        // A read-write configured mount must be writable by the container user; the backend never
        // changes the permissions of a user's directory.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(root.join("scratch"), std::fs::Permissions::from_mode(0o777)).unwrap();
        let yaml = format!(
            r#"name: {name}
task: Exercise the Docker backend.
tools:
  toolpacks:
    - core
    - path: ./toolpacks/alpha
    - path: ./toolpacks/beta
agents:
  pm:
    role: project-manager
    tools: [messages.send, alpha.*]
    env:
      GREETING: hello
    mounts:
      - source: ./scratch
        target: /mnt/scratch
        readonly: false
  worker:
    tools: [beta.*]
backend:
  docker:
    mounts:
      - source: ./data
        target: /mnt/data
{backend_yaml}
  runner:
    model: main
    models:
      providers:
        cloud:
          type: openai-compatible
          apiKey: {SECRET}
          baseURL: http://127.0.0.1:9/v1
      presets:
        main:
          provider: cloud
          model: test-model
"#
        );
        std::fs::write(root.join("suzumio.yaml"), yaml).unwrap();
        TestProject { root, name }
    }

    fn load(&self) -> Project {
        Project::load(&self.root, &ProcessEnv).unwrap_or_else(|e| panic!("test project loads: {e:?}"))
    }

    /// The spec of `agent`, with the probe standing in for the runner: the host's busybox is
    /// mounted where the runner goes (so that mount is exercised), and the image's busybox runs
    /// `script` (busybox picks its applet from argv[0], so it cannot run under the runner's name).
    fn spec(&self, project: &Project, agent: &str, script: &str) -> ContainerSpec {
        let mut spec = ContainerSpec::for_agent(&project.config, &project.registry, agent, Path::new("/bin/busybox"))
            .expect("spec builds");
        spec.runner_token = TOKEN.into();
        spec.entrypoint = vec!["/bin/busybox".into()];
        spec.cmd = vec!["sh".into(), "-c".into(), script.into()];
        spec
    }
}

impl Drop for TestProject {
    fn drop(&mut self) {
        let filter = format!("label={ROOT_LABEL}={}", self.root.display());
        if let Ok(out) = Command::new("docker").args(["ps", "-aq", "--filter", &filter]).output() {
            let ids: Vec<String> = String::from_utf8_lossy(&out.stdout).split_whitespace().map(String::from).collect();
            if !ids.is_empty() {
                let _ = Command::new("docker").arg("rm").arg("-f").args(&ids).output();
            }
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn docker_cli(args: &[&str]) -> String {
    let out = Command::new("docker").args(args).output().expect("the docker CLI runs");
    assert!(out.status.success(), "docker {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn container_logs(name: &str) -> String {
    Command::new("docker")
        .args(["logs", name])
        .output()
        .map(|o| format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)))
        .unwrap_or_default()
}

const SLEEP: &str = "exec sleep 3600";

// ---------------------------------------------------------------------------------------------
// the image

#[tokio::test]
async fn minimal_image_builds_offline_and_is_reused() {
    let backend = backend().await;
    let tag = format!("suzumio-runner:test-{}", std::process::id());
    let built = rebuild_minimal_image(&backend, &tag).await.expect("image builds");
    assert!(built.built, "{built:?}");
    assert!(built.to_string().starts_with(&format!("Built {tag} (")), "{built}");
    let again = ensure_minimal_image(&backend, &tag).await.expect("image found");
    assert!(!again.built, "the second call reuses the image: {again:?}");
    assert_eq!(again.id, built.id);
    assert!(again.to_string().contains("is already present"), "{again}");

    let label =
        docker_cli(&["image", "inspect", "-f", &format!("{{{{index .Config.Labels \"{IMAGE_KIND_LABEL}\"}}}}"), &tag]);
    assert_eq!(label.trim(), "minimal");
    let inside = docker_cli(&[
        "run",
        "--rm",
        &tag,
        "sh",
        "-c",
        "id -un; id -u; ls /bin | wc -l; test -d /run/suzumio && echo mountpoints",
    ]);
    let expected_links = 39 + 1; // applets + busybox itself
    assert_eq!(
        inside.split_whitespace().collect::<Vec<_>>(),
        ["runner", "65534", &expected_links.to_string(), "mountpoints"]
    );
    docker_cli(&["rmi", &tag]);
}

#[tokio::test]
async fn an_unreachable_engine_says_where_and_what_to_do() {
    let err = DockerBackend::connect_at("/nonexistent/docker.sock").await.unwrap_err();
    assert!(matches!(err, BackendError::EngineUnreachable { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.starts_with("Docker engine not reachable at /nonexistent/docker.sock: "), "{text}");
    assert!(text.ends_with("Start it (e.g. `dockerd &` or scripts/setup.sh)"), "{text}");

    // A socket file nobody listens on.
    let dir = std::env::temp_dir().join(format!("suzumio-dead-sock-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("docker.sock");
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    let err = DockerBackend::connect_at(path.to_str().unwrap()).await.unwrap_err().to_string();
    assert!(err.contains("not reachable") && err.contains("refused"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

// ---------------------------------------------------------------------------------------------
// the spec

#[test]
fn mount_table_follows_the_design() {
    let p = TestProject::new("mounts", "");
    let project = p.load();
    let mut spec = ContainerSpec::for_agent(&project.config, &project.registry, "pm", Path::new("/opt/runner"))
        .expect("spec builds");
    spec.runner_token = TOKEN.into();
    let r = &p.root;
    let m = |source: PathBuf, target: &str, readonly: bool| MountSpec { source, target: target.into(), readonly };
    assert_eq!(
        spec.mounts,
        vec![
            m("/opt/runner".into(), "/opt/suzumio/suzumio-runner", true),
            m(r.join("workspaces/pm"), "/workspace", false),
            m(r.join("artifacts/pm"), "/artifacts/pm", false),
            m(r.join("artifacts/worker"), "/artifacts/worker", true),
            m(r.join("data"), "/mnt/data", true),
            m(r.join("scratch"), "/mnt/scratch", false),
            m(r.join("toolpacks/alpha"), "/toolpacks/alpha", true),
            m(r.join(".suzumio/run/pm"), "/run/suzumio", true),
        ]
    );
    assert_eq!(spec.name, format!("suzumio-{}-pm", p.name));
    assert_eq!(spec.entrypoint, ["/opt/suzumio/suzumio-runner"]);
    let env: Vec<(&str, &str)> = spec.env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    assert_eq!(
        env,
        [("GREETING", "hello"), ("SUZUMIO_AGENT", "pm"), ("SUZUMIO_PROJECT", p.name.as_str())],
        "no token in the environment: every process of the container's user could read it there"
    );
    assert_eq!(spec.limits.network, "none");
    assert!(!format!("{spec:?}").contains(TOKEN), "Debug output hides the token");

    let worker = ContainerSpec::for_agent(&project.config, &project.registry, "worker", Path::new("/opt/runner"))
        .expect("spec builds");
    let targets: Vec<(&str, bool)> = worker.mounts.iter().map(|m| (m.target.as_str(), m.readonly)).collect();
    assert_eq!(
        targets,
        [
            ("/opt/suzumio/suzumio-runner", true),
            ("/workspace", false),
            ("/artifacts/pm", true),
            ("/artifacts/worker", false),
            ("/mnt/data", true),
            ("/toolpacks/beta", true),
            ("/run/suzumio", true),
        ]
    );

    let err = ContainerSpec::for_agent(&project.config, &project.registry, "ghost", Path::new("/opt/runner"))
        .unwrap_err()
        .to_string();
    assert_eq!(err, format!("Agent ghost is not defined in project {}", p.name));
}

/// Config validation accepts `/run` and `/opt` as targets, but they would hide the control socket
/// and the runner.
#[test]
fn a_configured_mount_may_not_cover_what_suzumio_mounts() {
    // `suzumio check` refuses these first (with file:line); the backend refuses them again when
    // a spec is built, so a config that bypassed validation still cannot shadow our mounts.
    for target in ["/run", "/opt"] {
        let p = TestProject::new("shadow", &format!("      - source: ./scratch\n        target: {target}"));
        let err = Project::load(&p.root, &ProcessEnv).err().expect("the config is refused").to_string();
        assert!(err.contains(&format!("Docker mount target is reserved: {target}")), "{err}");
    }
}

/// A project from elsewhere must not get `/` chowned and mounted writable through a symlink.
#[test]
fn a_symlinked_workspace_is_refused_before_anything_is_chowned() {
    let p = TestProject::new("symlink", "");
    let project = p.load();
    let target = p.root.join("elsewhere");
    std::fs::create_dir_all(&target).unwrap();
    std::fs::create_dir_all(p.root.join("workspaces")).unwrap();
    std::os::unix::fs::symlink(&target, p.root.join("workspaces/pm")).unwrap();
    let spec = ContainerSpec::for_agent(&project.config, &project.registry, "pm", Path::new("/bin/busybox"))
        .expect("spec builds");
    let err = spec.prepare_host(suzumio::backend::RunnerUser::RUNNER).unwrap_err().to_string();
    assert!(err.contains("workspaces/pm is a symlink"), "{err}");
    use std::os::unix::fs::MetadataExt;
    assert_ne!(std::fs::metadata(&target).unwrap().uid(), 65534, "nothing was chowned through the link");
}

// ---------------------------------------------------------------------------------------------
// the hardened container, seen from inside

/// Records `name=ok` or `name=fail:<error>` for each check, then idles like a runner would.
fn probe_script(own: &str, other: &str, own_pack: &str, other_pack: &str) -> String {
    format!(
        r#"
out=/workspace/probe.tmp
r() {{ echo "$1=$2" >> $out; }}
try() {{ n=$1; shift; if e=$("$@" 2>&1); then r $n ok; else r $n "fail:$e"; fi; }}
r uid "$(id -u)"
r gid "$(id -g)"
r net "$(ls /sys/class/net | tr '\n' ' ')"
r cwd "$(pwd)"
try write_workspace touch /workspace/x
try write_own_artifacts touch /artifacts/{own}/x
try write_other_artifacts touch /artifacts/{other}/x
try read_other_artifacts ls /artifacts/{other}
try read_pack cat /toolpacks/{own_pack}/suzumio.toolpack.json
try write_pack touch /toolpacks/{own_pack}/x
try other_pack_present test -e /toolpacks/{other_pack}
try write_root touch /x
try write_etc touch /etc/x
try write_tmp touch /tmp/x
try runner_present test -f /opt/suzumio/suzumio-runner
try write_runner touch /opt/suzumio/suzumio-runner
try control_dir test -d /run/suzumio
try write_control touch /run/suzumio/x
try read_data cat /mnt/data/hello.txt
try write_data touch /mnt/data/x
try write_scratch touch /mnt/scratch/x
r capeff "$(grep CapEff /proc/self/status | awk '{{print $2}}')"
r capprm "$(grep CapPrm /proc/self/status | awk '{{print $2}}')"
r nnp "$(grep NoNewPrivs /proc/self/status | awk '{{print $2}}')"
r env_keys "$(env | cut -d= -f1 | sort | tr '\n' ' ')"
r token_env "${{SUZUMIO_TOKEN:-none}}"
r token_file "$(cat /run/suzumio/token)"
r secret_in_env "$(env | grep -c {SECRET})"
mv $out /workspace/probe.out
{SLEEP}
"#
    )
}

/// Wait for the probe's report in the agent's workspace.
async fn probe_report(root: &Path, agent: &str, container: &str) -> BTreeMap<String, String> {
    let path = root.join("workspaces").join(agent).join("probe.out");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(text) = std::fs::read_to_string(&path) {
            return text
                .lines()
                .filter_map(|l| l.split_once('='))
                .map(|(k, v)| (k.to_string(), v.trim().to_string()))
                .collect();
        }
        assert!(Instant::now() < deadline, "no probe report from {container}; logs:\n{}", container_logs(container));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn check_probe(report: &BTreeMap<String, String>, agent: &str) {
    let get = |k: &str| report.get(k).map(String::as_str).unwrap_or_else(|| panic!("{agent}: no `{k}` in {report:#?}"));
    let ok = |k: &str| assert_eq!(get(k), "ok", "{agent}: {k}");
    let read_only = |k: &str| {
        let v = get(k);
        assert!(
            v.starts_with("fail:") && v.contains("Read-only file system"),
            "{agent}: {k} must fail with EROFS, got {v}"
        );
    };
    assert_eq!(get("uid"), "65534", "{agent}");
    assert_eq!(get("gid"), "65534", "{agent}");
    assert_eq!(get("net"), "lo", "{agent}: only loopback");
    assert_eq!(get("cwd"), "/workspace", "{agent}");
    ok("write_workspace");
    ok("write_own_artifacts");
    read_only("write_other_artifacts");
    ok("read_other_artifacts");
    ok("read_pack");
    read_only("write_pack");
    assert!(get("other_pack_present").starts_with("fail"), "{agent}: a pack it may not use is not mounted");
    read_only("write_root");
    read_only("write_etc");
    ok("write_tmp");
    ok("runner_present");
    read_only("write_runner");
    ok("control_dir");
    read_only("write_control");
    ok("read_data");
    read_only("write_data");
    assert_eq!(get("capeff"), "0000000000000000", "{agent}: no effective capabilities");
    assert_eq!(get("capprm"), "0000000000000000", "{agent}: no permitted capabilities");
    assert_eq!(get("nnp"), "1", "{agent}: no_new_privs");
    assert_eq!(get("token_env"), "none", "{agent}: the token is not in the environment");
    assert_eq!(get("token_file"), TOKEN, "{agent}: the token file is written before the start, for its user");
    assert_eq!(get("secret_in_env"), "0", "{agent}: the model key never enters a container");
    let keys = get("env_keys");
    assert!(!keys.to_ascii_uppercase().contains("API_KEY"), "{agent}: env names: {keys}");
}

#[tokio::test]
async fn two_agents_get_hardened_isolated_containers() {
    let backend = backend().await;
    let p = TestProject::new("probe", "");
    let project = p.load();
    let pm = p.spec(&project, "pm", &probe_script("pm", "worker", "alpha", "beta"));
    let worker = p.spec(&project, "worker", &probe_script("worker", "pm", "beta", "alpha"));

    let (a, b) = tokio::join!(backend.ensure_running(&pm), backend.ensure_running(&worker));
    let (a, b) = (a.expect("pm starts"), b.expect("worker starts"));
    assert!(a.created && b.created);

    let (pm_report, worker_report) =
        tokio::join!(probe_report(&p.root, "pm", &pm.name), probe_report(&p.root, "worker", &worker.name));
    eprintln!("pm, seen from inside: {pm_report:#?}");
    check_probe(&pm_report, "pm");
    check_probe(&worker_report, "worker");
    // Per-agent differences: only pm has the read-write scratch mount and the GREETING env.
    assert_eq!(pm_report["write_scratch"], "ok");
    assert!(worker_report["write_scratch"].starts_with("fail"), "{worker_report:#?}");
    assert!(pm_report["env_keys"].contains("GREETING"));
    assert!(!worker_report["env_keys"].contains("GREETING"));
    // What pm wrote to its artifacts is visible to the worker, read-only.
    assert!(p.root.join("artifacts/pm/x").exists());

    let inspect = backend.client().inspect_container(&pm.name, None).await.expect("inspect");
    let labels = inspect.config.and_then(|c| c.labels).unwrap_or_default();
    assert_eq!(labels.get(PROJECT_LABEL), Some(&p.name));
    assert_eq!(labels.get(AGENT_LABEL).map(String::as_str), Some("pm"));
    assert_eq!(labels.get(ROOT_LABEL).map(PathBuf::from), Some(p.root.clone()));
    assert_eq!(labels.get(SPEC_LABEL).map(String::len), Some(16));
    let host = inspect.host_config.expect("host config");
    assert_eq!(host.readonly_rootfs, Some(true));
    assert_eq!(host.init, Some(true));
    assert_eq!(host.network_mode.as_deref(), Some("none"));
    assert_eq!(host.memory, Some(1 << 30));
    assert_eq!(host.pids_limit, Some(256));
    assert_eq!(host.nano_cpus, Some(1_000_000_000));

    assert!(backend.is_running(&pm.name).await.unwrap());
    let stopped = backend.stop_all(&p.name, &p.root, Duration::from_secs(2)).await.expect("stop_all");
    assert_eq!(stopped.len(), 2, "{stopped:?}");
    assert!(!backend.is_running(&pm.name).await.unwrap());
    assert!(!backend.is_running(&worker.name).await.unwrap());
}

// ---------------------------------------------------------------------------------------------
// lifecycle

#[tokio::test]
async fn remove_stale_removes_only_this_projects_leftovers() {
    let backend = backend().await;
    let p = TestProject::new("stale", "");
    let project = p.load();
    let spec = p.spec(&project, "pm", SLEEP);
    backend.ensure_running(&spec).await.expect("starts");

    // The same project name at another root: a different project, whose container name is taken.
    let twin = TestProject { root: p.root.with_extension("twin"), name: p.name.clone() };
    copy_dir(&p.root, &twin.root);
    let twin_project = twin.load();
    let twin_spec = twin.spec(&twin_project, "pm", SLEEP);
    let err = backend.ensure_running(&twin_spec).await.unwrap_err();
    assert!(matches!(err, BackendError::NameTaken { .. }), "{err:?}");
    assert!(err.to_string().contains(&format!("docker rm -f {}", spec.name)), "{err}");
    assert_eq!(backend.remove_stale(&twin.name, &twin.root).await.unwrap(), Vec::<String>::new());
    assert!(backend.is_running(&spec.name).await.unwrap(), "another root's sweep leaves it alone");

    // A new controller (a new connection) sweeps what the previous one left.
    let next = DockerBackend::connect().await.unwrap();
    let removed = next.remove_stale(&p.name, &p.root).await.expect("remove_stale");
    assert_eq!(removed, vec![spec.name.clone()]);
    assert!(!next.is_running(&spec.name).await.unwrap());
    let left = docker_cli(&["ps", "-aq", "--filter", &format!("name=^{}$", spec.name)]);
    assert!(left.trim().is_empty(), "container still listed: {left}");
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

#[tokio::test]
async fn a_killed_container_is_reported_and_brought_back() {
    let backend = backend().await;
    let p = TestProject::new("kill", "");
    let project = p.load();
    let spec = p.spec(&project, "worker", SLEEP);
    let first = backend.ensure_running(&spec).await.expect("starts");

    // The supervisor sees the backend only through the trait.
    let runners: Arc<dyn RunnerBackend> = Arc::new(backend.clone());
    let monitor = tokio::spawn({
        let runners = runners.clone();
        let spec = spec.clone();
        async move { runners.wait_exit(&spec).await }
    });
    // No pause for the monitor to subscribe: the engine answers a wait on an exited container
    // with its exit code, so the kill may land before or after.
    docker_cli(&["kill", &spec.name]);
    let exit = tokio::time::timeout(Duration::from_secs(20), monitor).await.expect("wait_exit returns").unwrap();
    let exit = exit.expect("exit reported");
    assert_eq!(exit.code, 137, "{exit:?}");
    assert!(!exit.oom_killed, "{exit:?}");
    assert!(!runners.is_running(&spec).await.unwrap());

    let second = runners.ensure_running(&spec).await.expect("brought back");
    assert!(second.created);
    assert_ne!(second.id, first.id, "a stopped container is replaced, not restarted");
    assert!(runners.is_running(&spec).await.unwrap());

    let third = backend.restart(&spec, Duration::from_secs(1)).await.expect("restart");
    assert_ne!(third.id, second.id);
    runners.stop(&spec, Duration::from_secs(1)).await.expect("stop");
    assert!(!runners.is_running(&spec).await.unwrap());
    backend.stop(&spec.name, Duration::from_secs(1)).await.expect("stopping a gone container is fine");
    let err = backend.wait_exit(&spec.name).await.unwrap_err();
    assert!(matches!(err, BackendError::ContainerNotFound { .. }), "{err:?}");
}

#[tokio::test]
async fn running_out_of_memory_is_reported_as_oom_killed() {
    let backend = backend().await;
    let p = TestProject::new("oom", "    memory: 32m");
    let project = p.load();
    // Doubling a shell string touches ever more memory until the limit is reached.
    let spec = p.spec(&project, "pm", r#"x=aaaaaaaa; while true; do x="$x$x"; done"#);
    backend.ensure_running(&spec).await.expect("starts");
    let exit = tokio::time::timeout(Duration::from_secs(60), backend.wait_exit(&spec.name))
        .await
        .expect("the container dies")
        .expect("exit reported");
    assert!(exit.oom_killed, "{exit:?}; logs:\n{}", container_logs(&spec.name));
    assert_eq!(exit.code, 137, "{exit:?}");
}

#[tokio::test]
async fn an_unchanged_spec_keeps_the_container_and_a_changed_one_replaces_it() {
    let backend = backend().await;
    let p = TestProject::new("respec", "");
    let project = p.load();
    let mut spec = p.spec(&project, "pm", SLEEP);
    let first = backend.ensure_running(&spec).await.expect("starts");
    let same = backend.ensure_running(&spec).await.expect("still running");
    assert_eq!((same.created, &same.id), (false, &first.id));

    spec.env.insert("EXTRA".into(), "1".into());
    let changed = backend.ensure_running(&spec).await.expect("recreated");
    assert!(changed.created);
    assert_ne!(changed.id, first.id);
    backend.stop(&spec.name, Duration::from_secs(1)).await.unwrap();
}

#[tokio::test]
async fn a_missing_image_or_runner_is_reported_before_anything_starts() {
    let backend = backend().await;
    let p = TestProject::new("missing", "");
    let project = p.load();
    let mut spec = p.spec(&project, "pm", SLEEP);
    spec.image = "suzumio-no-such-image:never".into();
    let err = backend.ensure_running(&spec).await.unwrap_err();
    assert!(matches!(err, BackendError::ImageNotFound { .. }), "{err:?}");
    assert!(err.to_string().contains("suzumio image build"), "{err}");

    let spec =
        ContainerSpec::for_agent(&project.config, &project.registry, "pm", Path::new("/nonexistent/suzumio-runner"))
            .unwrap();
    let err = backend.ensure_running(&spec).await.unwrap_err();
    assert!(matches!(err, BackendError::RunnerBinaryMissing { .. }), "{err:?}");
    assert!(!backend.is_running(&spec.name).await.unwrap());
}

// ---------------------------------------------------------------------------------------------
// repeated starts (how fast they are is the bench's question, not this test's)

#[tokio::test]
async fn a_container_stopped_at_once_is_created_anew_each_time_and_none_is_left_behind() {
    let backend = backend().await;
    let p = TestProject::new("restart", "");
    let project = p.load();
    let spec = p.spec(&project, "pm", SLEEP);
    let mut ids = Vec::new();
    for round in 0..3 {
        let started = backend.ensure_running(&spec).await.expect("starts");
        assert!(started.created, "round {round}: a stopped container is created anew: {started:?}");
        let again = backend.ensure_running(&spec).await.expect("still running");
        assert_eq!((again.created, &again.id), (false, &started.id), "round {round}: a running one is reused");
        backend.stop(&spec.name, Duration::ZERO).await.unwrap();
        assert!(!backend.is_running(&spec.name).await.unwrap(), "round {round}: stopped");
        ids.push(started.id);
    }
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 3, "each start made a new container: {ids:?}");
    let left = docker_cli(&["ps", "-aq", "--filter", &format!("name=^{}$", spec.name)]);
    assert!(left.trim().is_empty(), "a stopped container is not left behind: {left}");
}
