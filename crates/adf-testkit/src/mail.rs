//! Real mail servers (IMAP and SMTP) on loopback for the email adapter's tests.
