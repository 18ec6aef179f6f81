//! The `capstan` binary for tests of packages other than the agent's (whose own tests have
//! `CARGO_BIN_EXE_capstan`): the one the workspace's test build made, next to the test binaries,
//! so a test runs exactly what the build produced, with the `dev` feature the tests build with,
//! instead of a `cargo run` that builds capstan once more with other features.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// The binary: `$CAPSTAN_BIN` when set, else `capstan` in the target directory this test binary
/// runs from (`target/debug/deps/<test>` → `target/debug/capstan`), built there first with
/// `cargo build -p capstan -F dev` when a test binary runs alone, before the workspace built it.
pub fn capstan_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(p) = std::env::var_os("CAPSTAN_BIN") {
            return PathBuf::from(p);
        }
        let exe = std::env::current_exe().expect("the test binary's path");
        let profile = exe
            .parent()
            .and_then(|deps| deps.parent())
            .expect("a test binary under target/<profile>/deps");
        let bin = profile.join("capstan");
        if !bin.exists() {
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
            let status = Command::new(cargo)
                .current_dir(&root)
                .args([
                    "build", "-q", "-p", "capstan", "-F", "dev", "--bin", "capstan",
                ])
                .status()
                .expect("running cargo build");
            assert!(status.success(), "cargo build -p capstan failed");
        }
        bin
    })
    .clone()
}
