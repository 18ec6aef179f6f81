//! Shared helpers of capstan's end-to-end tests.

use std::path::PathBuf;

/// The repository root.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("repository root")
}

/// `examples/fleet`.
pub fn example_fleet() -> PathBuf {
    repo_root().join("examples/fleet")
}
