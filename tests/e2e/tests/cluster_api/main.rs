//! The scenarios on the real Cluster API controllers: the lifecycle, ordered upgrades and the
//! upgrade soak, the stage timeout, and the dashboard following all of it in a browser.
//!
//! CAPD's in-memory backend listens on a fixed port, so one process on the machine runs the
//! controllers at a time: every test here shares the one control plane with controllers
//! (`capstan_harness::shared_with_controllers()`), each in a namespace and under cluster names of
//! its own. Each former test file is a module and its tests keep their names under it
//! (`upgrades::...`).

mod bare_metal;
mod dashboard;
mod lifecycle;
mod mirror;
mod nutanix;
mod soak;
mod stand_in;
mod timing;
mod upgrades;
