//! adf-egress integration tests: one binary (see the workspace's test layout).
mod call_sites;
mod policy;
mod record;
