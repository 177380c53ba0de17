//! Messaging cost on each side of the wire, without the network: `msg_send`'s prepare step
//! (open the agent's key, compose, sign — and encrypt at level 2 — and store the outbox row and
//! the `inbox_mode` copy in one transaction) and mesh ingress (verify, decrypt, verify, store the
//! inbox row) on the recipient's file.
//!
//! ```text
//! cargo bench -p adf-runtime --bench messages -- [--messages N] [--runs R]
//! ```
//!
//! Each figure is the median of R runs (default 9) of N messages (default 500), per message.
//! Results go to BENCHMARKS.md.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// A test or bench crate: its shared modules are private to it, and docs are for library users.
#![allow(unreachable_pub, missing_docs)]

mod common;

use std::time::Instant;

use adf_runtime::home::RuntimeHome;
use adf_runtime::identity::{self, LocalKeys};
use adf_runtime::messaging::receive::{self, Arrival};
use adf_runtime::messaging::send::{self, SendContext};
use adf_runtime::messaging::{Origin, agent_did};
use adf_store::{AdfFile, Caller, ConfigAction, CreateOptions};
use common::{arg, median};
use serde_json::json;

fn agent(dir: &std::path::Path, name: &str, keys: &LocalKeys, level: u8) -> AdfFile {
    let mut file = AdfFile::create(
        dir.join(format!("{name}.adf")),
        &CreateOptions {
            name: Some(name.to_owned()),
            ..CreateOptions::default()
        },
    )
    .unwrap();
    identity::provision_new(&mut file, keys).unwrap();
    file.config_set_path(
        Caller::Owner,
        "security.level",
        ConfigAction::Set,
        json!(level),
    )
    .unwrap();
    file
}

fn main() {
    let messages = arg("--messages", 500);
    let runs = arg("--runs", 9);
    let dir = tempfile::tempdir().unwrap();
    let home = RuntimeHome::at(dir.path().join("home"));
    home.init_owner(false).unwrap();
    let keys = LocalKeys::from_home(&home).unwrap();
    for level in [1u8, 2] {
        let mut sender = agent(dir.path(), &format!("sender{level}"), &keys, level);
        let mut recipient = agent(dir.path(), &format!("recipient{level}"), &keys, 1);
        let to = agent_did(&recipient).unwrap().unwrap();
        let args = json!({
            "recipient": to,
            "address": "http://127.0.0.1:9/agents/recipient/inbox",
            "content": "The nightly report is ready: 42 checks passed, 0 failed.",
        });
        let (mut send_samples, mut receive_samples) = (Vec::new(), Vec::new());
        for _ in 0..runs {
            let mut wires = Vec::with_capacity(messages);
            let started = Instant::now();
            for _ in 0..messages {
                let config = sender.config_shared().unwrap();
                let prepared = sender
                    .atomically(|file| {
                        send::prepare(
                            file,
                            &config,
                            &args,
                            SendContext {
                                mesh: None,
                                keys: Some(&keys),
                            },
                        )
                    })
                    .unwrap();
                wires.push(serde_json::to_vec(&prepared.message).unwrap());
            }
            send_samples.push(started.elapsed() / u32::try_from(messages).unwrap());
            let started = Instant::now();
            for wire in &wires {
                receive::accept(
                    &mut recipient,
                    &Arrival {
                        wire,
                        origin: Origin::Loopback,
                        transport: "http",
                        return_path: None,
                    },
                    Some(&keys),
                )
                .unwrap();
            }
            receive_samples.push(started.elapsed() / u32::try_from(messages).unwrap());
        }
        println!(
            "level {level}: send (prepare) {:.1} µs, receive (accept) {:.1} µs per message",
            median(send_samples).as_secs_f64() * 1e6,
            median(receive_samples).as_secs_f64() * 1e6
        );
    }
}
