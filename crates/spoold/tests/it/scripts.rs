//! The repository's own commands, run for real in a copy of their `scripts/` with stand-ins for
//! what would take minutes (cargo's builds): `scripts/install` builds both binaries with one
//! `cargo build --profile dist`, puts them under `--root`, and removes them with `--uninstall`.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use tempfile::TempDir;

/// The repository's `scripts/` directory.
fn scripts() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts")
}

/// An executable `#!/bin/sh` script at `path`.
fn stand_in(path: &Path, body: &str) {
    std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
    std::fs::write(path, format!("#!/bin/sh\n{body}")).expect("write");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// A checkout in a temporary directory holding copies of `names` from `scripts/`, and a
/// directory for stand-in tools that comes first on `PATH`.
struct Checkout {
    dir: TempDir,
}

impl Checkout {
    fn with(names: &[&str]) -> Checkout {
        let dir = TempDir::new().expect("temp dir");
        std::fs::create_dir_all(dir.path().join("scripts")).expect("mkdir");
        for name in names {
            let to = dir.path().join("scripts").join(name);
            std::fs::copy(scripts().join(name), &to).expect("copy the script");
        }
        Checkout { dir }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// A stand-in for the tool `name`, first on `PATH`.
    fn tool(&self, name: &str, body: &str) {
        stand_in(&self.path("bin").join(name), body);
    }

    /// What the stand-ins wrote to `calls.log`, a line a call.
    fn calls(&self) -> Vec<String> {
        std::fs::read_to_string(self.path("calls.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// Run `scripts/NAME ARGS…` with the stand-ins first on `PATH`, bounded.
    async fn run(&self, name: &str, args: &[&str]) -> Output {
        let path = format!(
            "{}:{}",
            self.path("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut cmd = tokio::process::Command::new(self.path("scripts").join(name));
        cmd.args(args)
            .current_dir(self.dir.path())
            .env("PATH", path)
            .env("CALLS", self.path("calls.log"))
            .env_remove("CARGO_INSTALL_ROOT")
            .env_remove("CARGO_TARGET_DIR")
            .env_remove("SPOOLD_REQUIRE_TOOLS")
            .env_remove("SPOOLD_REQUIRE_NETNS")
            .env_remove("SPOOLD_TEST_SKIPS");
        spool_testkit::run_in_group(cmd, Duration::from_secs(60))
            .await
            .unwrap_or_else(|e| panic!("scripts/{name}: {e:#}"))
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A cargo that logs each call and, for `build`, writes the two binaries where the real one
/// would (`target/dist/`); `install --list` reports an earlier `cargo install` of spoold under
/// the root when `old-install` exists there.
const CARGO: &str = r#"echo "cargo $*" >>"$CALLS"
case $1 in
  build) mkdir -p target/dist && echo spoold >target/dist/spoold && echo spoolctl >target/dist/spoolctl ;;
  metadata) printf '{"packages":[],"target_directory":"%s/target","version":1}\n' "$PWD" ;;
  install) [ -e "$4/old-install" ] && printf 'spoold v0.0.9 (/old):\n    spoold\n' ;;
esac
exit 0
"#;

#[tokio::test(flavor = "multi_thread")]
async fn install_builds_once_installs_under_the_root_and_uninstalls() {
    let c = Checkout::with(&["install"]);
    c.tool("cargo", CARGO);
    c.tool("cc", "exit 0\n");
    let root = c.path("prefix");
    let root_arg = root.display().to_string();

    // An earlier install by `cargo install` (the old way) is forgotten, not left listed.
    std::fs::create_dir_all(&root).expect("mkdir");
    std::fs::write(root.join("old-install"), "").expect("mark");
    let o = c.run("install", &["--root", &root_arg]).await;
    assert!(o.status.success(), "{}{}", text(&o.stdout), text(&o.stderr));
    let calls = c.calls();
    let builds: Vec<&String> = calls
        .iter()
        .filter(|l| l.starts_with("cargo build"))
        .collect();
    assert_eq!(
        builds,
        ["cargo build --locked --profile dist -p spoold -p spoolctl"],
        "one build for both: {calls:?}"
    );
    assert!(
        calls
            .iter()
            .any(|l| l == &format!("cargo uninstall --quiet --root {root_arg} spoold")),
        "{calls:?}"
    );
    for (name, content) in [("spoold", "spoold\n"), ("spoolctl", "spoolctl\n")] {
        let file = root.join("bin").join(name);
        assert_eq!(std::fs::read_to_string(&file).expect(name), content);
        let mode = std::fs::metadata(&file).expect("stat").permissions().mode();
        assert_eq!(mode & 0o777, 0o755, "{name}");
    }
    assert!(
        text(&o.stdout).contains(&format!(
            "installed {root_arg}/bin/spoold and {root_arg}/bin/spoolctl"
        )),
        "{}",
        text(&o.stdout)
    );

    // --uninstall (the `--root=DIR` spelling too) removes both and only them.
    std::fs::write(root.join("bin/other"), "").expect("another file");
    let o = c
        .run("install", &[&format!("--root={root_arg}"), "--uninstall"])
        .await;
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(!root.join("bin/spoold").exists() && !root.join("bin/spoolctl").exists());
    assert!(root.join("bin/other").exists());
    assert!(
        text(&o.stdout).contains("is left where it is"),
        "{}",
        text(&o.stdout)
    );

    // A word it does not know is a usage error, before anything is built.
    let before = c.calls().len();
    let o = c.run("install", &["--prefix", "/usr"]).await;
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("unknown argument '--prefix'"),
        "{}",
        text(&o.stderr)
    );
    assert_eq!(c.calls().len(), before);
}
