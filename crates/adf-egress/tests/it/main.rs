//! adf-egress integration tests: one binary (see the workspace's test layout).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod call_sites;
mod policy;
mod record;
