//! adf-egress integration tests: one binary (see the workspace's test layout).

#![allow(clippy::unwrap_used, clippy::expect_used)]
// A test or bench crate: its shared modules are private to it, and docs are for library users.
#![allow(unreachable_pub, missing_docs)]

mod machine;
mod names;
mod policy;
mod record;
mod service_redirects;
mod socket;
mod tcp;
