//! The Slack adapter's tests.
