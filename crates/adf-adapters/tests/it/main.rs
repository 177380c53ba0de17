//! adf-adapters' integration tests: the adapter host against adf-testkit's local Telegram Bot
//! API server (real HTTP on 127.0.0.1) and real `.adf` files written through adf-store.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod discord;
mod email;
mod slack;
mod telegram;
mod whatsapp;
