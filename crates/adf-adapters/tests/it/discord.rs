//! The Discord adapter's tests.
