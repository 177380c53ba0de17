//! adf-adapters' integration tests: the adapter host against adf-testkit's local Telegram Bot
//! API server (real HTTP on 127.0.0.1) and real `.adf` files written through adf-store.

mod common;
mod telegram;
