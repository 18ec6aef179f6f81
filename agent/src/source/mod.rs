//! The Git source (being written).
