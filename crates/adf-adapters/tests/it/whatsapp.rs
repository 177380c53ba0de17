//! The Whatsapp adapter's tests.
