//! The corpora that need no API server: the bad-input corpus, the golden files of the example
//! fleet, the cluster specs of EKS Anywhere's own documentation, and the values templates
//! capstan's Go template parser must read as Go does, and the SOPS files the real `sops` writes.
//!
//! One test binary, so capstan is linked once for all of them; each former test file is a
//! module and its tests keep their names under it (`bad_input::...`).

mod bad_input;
mod eksa_docs;
mod go_template;
mod golden;
mod sops;
