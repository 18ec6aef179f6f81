//! Triggers and the HTTP server (being written).
