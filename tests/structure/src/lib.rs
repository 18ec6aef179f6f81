//! Nothing here: the check is `tests/structure.rs`, which reads the product's sources.
