//! The agent's integration tests that need no API server: the real binary and the real servers
//! on loopback (Git over git://, http(s):// and ssh://, the GitHub stand-in, a release manifest
//! over https), the HTTP surface over real sockets, and the webhook fuzzer.
//!
//! One test binary, so the agent and its dependencies are linked once for all of them; each
//! former test file is a module and its tests keep their names under it (`source::...`).

#[path = "../source_support/mod.rs"]
mod source_support;

mod diff;
mod fuzz_webhook;
mod github;
mod github_actions;
mod open_pr;
mod rehearse;
mod release_https;
mod scaffold;
mod serve;
mod source;
mod source_https;
mod verify;
mod webhook_limits;
