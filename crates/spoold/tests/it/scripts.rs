//! The repository's own commands, run for real in a copy of their `scripts/` with stand-ins for
//! what would take minutes (cargo's builds and the suite they run): `scripts/install` builds
//! both binaries with one `cargo build --profile dist`, puts them under `--root`, and removes
//! them with `--uninstall`; `scripts/test` leaves the packages alone unless asked
//! (`--with-packages`) and ends by saying what it did not cover, which tests record
//! (`spool_testkit::skip`) and `scripts/not-covered` groups.

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

/// A cargo that logs each call and, for `build`, writes the three binaries where the real one
/// would (`target/dist/`); `install --list` reports an earlier `cargo install` of spoold under
/// the root when `old-install` exists there.
const CARGO: &str = r#"echo "cargo $*" >>"$CALLS"
case $1 in
  build) mkdir -p target/dist && for b in spoold spoold-attempt spoolctl; do echo $b >target/dist/$b; done ;;
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
    for name in ["spoold", "spoold-attempt", "spoolctl"] {
        let content = format!("{name}\n");
        let file = root.join("bin").join(name);
        assert_eq!(std::fs::read_to_string(&file).expect(name), content);
        let mode = std::fs::metadata(&file).expect("stat").permissions().mode();
        assert_eq!(mode & 0o777, 0o755, "{name}");
    }
    assert!(
        text(&o.stdout).contains(&format!(
            "installed {root_arg}/bin/spoold, {root_arg}/bin/spoold-attempt and \
             {root_arg}/bin/spoolctl"
        )),
        "{}",
        text(&o.stdout)
    );

    // --uninstall (the `--root=DIR` spelling too) removes the three and only them.
    std::fs::write(root.join("bin/other"), "").expect("another file");
    let o = c
        .run("install", &[&format!("--root={root_arg}"), "--uninstall"])
        .await;
    assert!(o.status.success(), "{}", text(&o.stderr));
    for name in ["spoold", "spoold-attempt", "spoolctl"] {
        assert!(!root.join("bin").join(name).exists(), "{name}");
    }
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

/// `scripts/test` with its heavy steps stood in for: cargo's runs only log (one test's skip is
/// recorded the way `spool_testkit::skip` records it), the API fuzzing run and the package test
/// only say they ran.
fn test_checkout() -> Checkout {
    let c = Checkout::with(&["test", "not-covered"]);
    c.tool(
        "cargo",
        r#"echo "cargo $*" >>"$CALLS"
if [ "$1 $2" = "nextest run" ]; then
  printf 'spoold::it\tshared_db::two_hosts\tSPOOLD_TEST_PG_URL is not set\tname a server\n' >>"$SPOOLD_TEST_SKIPS"
fi
exit 0
"#,
    );
    // Nothing is fetched: npm does nothing, and the Python the signing tests use is there.
    c.tool("npm", "echo \"npm $*\" >>\"$CALLS\"\n");
    stand_in(&c.path("target/pytools/bin/python"), "exit 0\n");
    // The book's builder, as scripts/test installs it (its version is asked first).
    stand_in(
        &c.path("target/tools/bin/mdbook"),
        "echo \"mdbook $*\" >>\"$CALLS\"\n[ \"$1\" = --version ] && echo 'mdbook v0.5.4'\nexit 0\n",
    );
    for step in ["api-fuzz", "package-test"] {
        stand_in(
            &c.path("scripts").join(step),
            &format!("echo \"scripts/{step}\" >>\"$CALLS\"\n"),
        );
    }
    c
}

#[tokio::test(flavor = "multi_thread")]
async fn the_test_command_leaves_the_packages_alone_unless_asked_and_says_what_it_skipped() {
    let root = spool_testkit::privileged::require_root().is_ok();
    let dpkg = spool_testkit::privileged::run("dpkg", ["--version"]).is_ok();
    let ip = spool_testkit::privileged::run("ip", ["-V"]).is_ok();
    let c = test_checkout();
    let o = c.run("test", &["-E", "test(/x/)"]).await;
    let out = text(&o.stdout);
    assert!(o.status.success(), "{out}{}", text(&o.stderr));
    let calls = c.calls();
    // nextest gets the arguments meant for it, and nothing installs or purges a package.
    assert!(
        calls.contains(&"cargo nextest run --workspace --no-fail-fast -E test(/x/)".to_owned()),
        "{calls:?}"
    );
    assert!(
        !calls.contains(&"scripts/package-test".to_owned()),
        "{calls:?}"
    );
    // The end of the run says what was not covered: the test that skipped itself, and the
    // steps skipped.
    let report = &out[out
        .find("scripts/test: not covered by this run")
        .expect(&out)..];
    assert!(
        report.contains(
            "  - 1 test: SPOOLD_TEST_PG_URL is not set\n      spoold::it shared_db::two_hosts\n      to cover: name a server\n"
        ),
        "{report}"
    );
    assert!(
        report.contains(
            "  - step scripts/package-test: the packages were not asked for: building them, \
             installing the .deb on this machine and purging it, and building the image\n      \
             to cover: scripts/test --with-packages"
        ),
        "{report}"
    );
    // The API fuzzing run too, where it cannot run.
    let skipped_steps = if root && ip { 1 } else { 2 };
    assert!(
        report.starts_with(&format!(
            "scripts/test: not covered by this run: 1 test that skipped itself (nextest counts \
             them as passed) and {skipped_steps} step{} of scripts/test:\n",
            if skipped_steps == 1 { "" } else { "s" }
        )),
        "{report}"
    );
    // Its record is gone with the run.
    let left: Vec<_> = std::fs::read_dir(c.path("target"))
        .expect("target")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("test-skips"))
        .collect();
    assert!(left.is_empty(), "{left:?}");

    // Asked, and able (root and dpkg): the package test runs.
    let o = test_checkout().run("test", &["--with-packages"]).await;
    assert!(o.status.success(), "{}", text(&o.stderr));
    let asked = text(&o.stdout);
    assert_eq!(
        asked.contains("step scripts/package-test"),
        !(root && dpkg),
        "{asked}"
    );
}

#[test]
fn the_report_groups_skips_by_cause_and_counts_a_test_once() {
    let dir = TempDir::new().expect("temp dir");
    let file = dir.path().join("skips.tsv");
    let pg = "SPOOLD_TEST_PG_URL is not set\tname one";
    let lines = [
        format!("spoold::it\ta::one\t{pg}"),
        format!("spoold::it\ta::two\t{pg}"),
        // A retried test says so twice.
        format!("spoold::it\ta::two\t{pg}"),
        format!("spool-store::it\tpostgres::three\t{pg}"),
        format!("spoold::it\tb::four\t{pg}"),
        "spoold::it\tnetns::five\tneeds root, runs as uid 1000\tset SPOOLD_REQUIRE_NETNS=1"
            .to_owned(),
        "scripts/test\tscripts/api-fuzz\tneeds root\trun as root".to_owned(),
    ];
    std::fs::write(&file, lines.join("\n") + "\n").expect("write");
    let o = std::process::Command::new(scripts().join("not-covered"))
        .arg(&file)
        .output()
        .expect("runs");
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(
        text(&o.stdout),
        "scripts/test: not covered by this run: 5 tests that skipped themselves (nextest counts \
         them as passed) and 1 step of scripts/test:\n\
         \x20 - 4 tests: SPOOLD_TEST_PG_URL is not set\n\
         \x20     spool-store::it postgres::three, spoold::it a::one, spoold::it a::two and 1 more\n\
         \x20     to cover: name one\n\
         \x20 - 1 test: needs root, runs as uid 1000\n\
         \x20     spoold::it netns::five\n\
         \x20     to cover: set SPOOLD_REQUIRE_NETNS=1\n\
         \x20 - step scripts/api-fuzz: needs root\n\
         \x20     to cover: run as root\n"
    );
    let o = std::process::Command::new(scripts().join("not-covered"))
        .arg(dir.path().join("none"))
        .output()
        .expect("runs");
    assert_eq!(
        text(&o.stdout),
        "scripts/test: every test and step ran; nothing was skipped\n"
    );
}

/// A test that skips itself is recorded under its own name, from the test binary as nextest
/// runs it (`--exact NAME`): this binary, run again for one PostgreSQL test with no server
/// named.
#[tokio::test(flavor = "multi_thread")]
async fn a_test_that_skips_itself_is_recorded_by_name() {
    let dir = TempDir::new().expect("temp dir");
    let record = dir.path().join("skips.tsv");
    let name = "validation::transitions_follow_the_state_machine_on_postgres";
    let mut cmd = tokio::process::Command::new(std::env::current_exe().expect("this binary"));
    cmd.args(["--exact", name, "--nocapture"])
        .env_remove(spool_testkit::pg::PG_URL_VAR)
        .env(spool_testkit::skip::RECORD_VAR, &record)
        .env("NEXTEST_BINARY_ID", "spoold::it");
    let o = spool_testkit::run_in_group(cmd, Duration::from_secs(60))
        .await
        .expect("the test runs");
    assert!(o.status.success(), "{}", text(&o.stderr));
    let recorded = std::fs::read_to_string(&record).expect("a record");
    assert_eq!(
        recorded,
        format!(
            "spoold::it\t{name}\tSPOOLD_TEST_PG_URL is not set (no PostgreSQL server to test \
             against)\tSPOOLD_TEST_PG_URL=postgres://USER@HOST:PORT/DB names one: any database \
             on it; each test creates and drops its own\n"
        )
    );
}
