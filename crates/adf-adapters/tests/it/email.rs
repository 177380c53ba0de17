//! The Email (real IMAP/SMTP servers) adapter's tests.
