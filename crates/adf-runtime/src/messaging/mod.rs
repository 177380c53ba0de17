//! Messaging between agents (spec §5.8, §8.5, §11): composing, signing and delivering ALF
//! messages (`msg_send`), accepting them (mesh ingress), and the rows both leave in
//! `adf_outbox` and `adf_inbox`.
//!
//! Principal types: [`Mesh`] (the agents a runtime hosts: same-runtime delivery, handle
//! resolution and discovery; the daemon implements it), [`send::Prepared`] (a composed, signed
//! message with its stored outbox row, ready to deliver), [`Delivery`] (how a delivery ended),
//! [`receive::Arrival`] (one inbound message and what the transport knows about it),
//! [`receive::Refusal`] (why ingress refused, with the HTTP status), [`Tier`] and [`Origin`]
//! (the visibility rule of §5.8).
//!
//! Sending is three steps so that no lock is held while the network works: compose, sign and
//! store the `pending` outbox row inside the tool call's transaction ([`send::prepare`]);
//! deliver outside it ([`send::deliver`]); record `delivered` or `failed` afterwards
//! ([`crate::tools::DetachedOutcome`]'s delivery records). Transport order (§12.2): same
//! runtime, then a WebSocket the sender holds open to the recipient
//! ([`Mesh::deliver_over_socket`], the daemon's outbound connections), then HTTP POST;
//! adapter recipients (`telegram:…`) go to the sending agent's channel adapter through
//! [`Mesh::deliver_to_adapter`] where the runtime runs adapters (the daemon), and are refused
//! elsewhere.
//!
//! Ingress (`receive::accept`) is the reverse pipeline of Appendix A.7 — receive flag,
//! visibility, sender lists, message signature, decryption, payload signature, trust-key
//! stripping, inbox middleware ([`crate::middleware`]) — then one inbox row (plus its audit
//! snapshot) in one transaction. Outbox middleware runs in [`send::prepare`] before signing.
//! Ingress needs only
//! an [`adf_store::AdfFile`]: the daemon runs it on a guest connection so that a delivery never
//! waits for a turn that holds the recipient's worker (two agents sending to each other while
//! both are mid-turn would otherwise wait on each other forever).

pub mod card;
pub mod receive;
pub mod send;

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use adf_store::AdfFile;
use futures::future::BoxFuture;
use serde::Serialize;
use serde_json::Value;

use crate::identity::{self, LocalKeys};

/// The agent's signing key, opened with the installation's `keys` (without them only a plain
/// legacy key opens), or why it cannot be.
pub fn agent_key(
    file: &mut AdfFile,
    keys: Option<&LocalKeys>,
) -> Result<adf_crypto::SigningKey, String> {
    let none = LocalKeys::new(None, None);
    let open = identity::open_identity(file, keys.unwrap_or(&none)).map_err(|e| e.to_string())?;
    identity::agent_signing_key(file, &open).map_err(|e| e.to_string())
}

/// The agent's DID (`adf_did`), `None` for an agent without identity.
pub fn agent_did(file: &AdfFile) -> Result<Option<String>, adf_store::StoreError> {
    Ok(file
        .meta_get(adf_crypto::rows::meta_keys::DID)?
        .map(|e| e.value)
        .filter(|did| !did.is_empty()))
}

/// `security.level` (§8.5): 1 when absent, at most 3.
pub fn security_level(config: &Value) -> u8 {
    config
        .pointer("/security/level")
        .and_then(Value::as_u64)
        .unwrap_or(1)
        .min(3) as u8
}

/// The reachability tier of an agent (`messaging.visibility`, §5.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    /// Nobody: not listed, inbound refused (sending still works).
    Off,
    /// Agents of the same runtime whose file is in the same or an ancestor directory.
    Directory,
    /// Any agent on this machine.
    Localhost,
    /// Any agent on the local network.
    Lan,
    /// Anyone who can reach the runtime.
    Public,
}

impl Tier {
    /// The agent's tier from its config (`localhost` when absent or unknown).
    pub fn of(config: &Value) -> Self {
        match config
            .pointer("/messaging/visibility")
            .and_then(Value::as_str)
        {
            Some("off") => Tier::Off,
            Some("directory") => Tier::Directory,
            Some("lan") => Tier::Lan,
            Some("public") => Tier::Public,
            _ => Tier::Localhost,
        }
    }

    /// The tier as `messaging.visibility` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Off => "off",
            Tier::Directory => "directory",
            Tier::Localhost => "localhost",
            Tier::Lan => "lan",
            Tier::Public => "public",
        }
    }

    /// Whether a sender at `origin` may reach (and discover) an agent of this tier whose file
    /// is `target`. Tiers nest: public ⊃ lan ⊃ localhost ⊃ directory.
    pub fn admits(self, origin: &Origin, target: &Path) -> bool {
        let needed = match origin {
            Origin::SameRuntime { sender } => {
                let sender_dir = sender.parent().unwrap_or(Path::new(""));
                let target_dir = target.parent().unwrap_or(Path::new(""));
                if target_dir.starts_with(sender_dir) {
                    Tier::Directory
                } else {
                    Tier::Localhost
                }
            }
            Origin::Loopback => Tier::Localhost,
            Origin::Lan => Tier::Lan,
            Origin::Public => Tier::Public,
        };
        self != Tier::Off && self >= needed
    }
}

/// Where an inbound message comes from, as far as the receiving runtime can tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// An agent of this runtime (its file path).
    SameRuntime {
        /// The sending agent's `.adf` file, whose directory decides the `directory` tier.
        sender: PathBuf,
    },
    /// Another process on this machine (a loopback peer address).
    Loopback,
    /// A private-network peer.
    Lan,
    /// Anyone else.
    Public,
}

impl Origin {
    /// The origin of an HTTP delivery from `peer`.
    pub fn of_peer(peer: IpAddr) -> Self {
        let peer = match peer {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
            v4 => v4,
        };
        match peer {
            IpAddr::V4(v4) if v4.is_loopback() => Origin::Loopback,
            IpAddr::V6(v6) if v6.is_loopback() => Origin::Loopback,
            IpAddr::V4(v4) if v4.is_private() || v4.is_link_local() => Origin::Lan,
            IpAddr::V4(v4) if v4.octets()[0] == 100 && (v4.octets()[1] & 0xc0) == 64 => Origin::Lan,
            IpAddr::V6(v6) if (v6.segments()[0] & 0xfe00) == 0xfc00 => Origin::Lan,
            IpAddr::V6(v6) if (v6.segments()[0] & 0xffc0) == 0xfe80 => Origin::Lan,
            _ => Origin::Public,
        }
    }
}

/// An agent of this runtime, as a sender may see it.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalAgent {
    /// The agent's handle, which same-runtime senders address it by.
    pub handle: String,
    /// `None` for an agent without identity.
    pub did: Option<String>,
    /// The description from its config, shown in discovery.
    pub description: String,
    /// The agent's `.adf` file.
    pub path: PathBuf,
    /// Its `messaging.visibility`, which decides who may reach and discover it.
    pub tier: Tier,
    /// Its mesh inbox URL on this runtime.
    pub inbox_url: String,
    /// Its card (signed when it has keys), with the directory decorations.
    pub card: Value,
}

/// A `chat_info` call (MSG-48), its arguments checked: `limit` is 1–100.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatInfoRequest {
    /// The adapter type (`telegram`, …).
    pub adapter: String,
    /// The platform's chat id (`source_context.chat_id` of an inbox row).
    pub chat_id: String,
    /// Participants to return at most.
    pub limit: u32,
}

/// One outbox row on its way to a channel adapter (`type:id` recipient).
#[derive(Debug, Clone, PartialEq)]
pub struct AdapterMessage {
    /// The `adf_outbox` row id.
    pub outbox_id: String,
    /// `type:id`, e.g. `telegram:123`.
    pub recipient: String,
    /// The text (or the form JSON).
    pub content: String,
    /// `content_type`.
    pub content_type: Option<String>,
    /// The `source_context` of the inbox row a reply answers (MSG-43), copied as is.
    pub source_context: Option<Value>,
}

/// How a delivery ended (§11.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Delivery {
    /// True when the recipient or its runtime accepted the message.
    pub delivered: bool,
    /// HTTP-style status (202 when accepted).
    pub status_code: Option<u16>,
    /// Why it failed, for the sender.
    pub error: Option<String>,
}

impl Delivery {
    /// A delivery the recipient accepted with `status_code`.
    pub fn accepted(status_code: u16) -> Self {
        Delivery {
            delivered: true,
            status_code: Some(status_code),
            error: None,
        }
    }

    /// A delivery that failed; `status_code` is the recipient's answer if there was one.
    pub fn failed(status_code: Option<u16>, error: impl Into<String>) -> Self {
        Delivery {
            delivered: false,
            status_code,
            error: Some(error.into()),
        }
    }
}

/// The agents a runtime hosts, for same-runtime delivery and discovery. The daemon implements
/// it; a runtime without one (`adf chat`, `adf run`) sends over HTTP only.
pub trait Mesh: Send + Sync + std::fmt::Debug {
    /// The hosted agents a sender whose file is `sender` may reach, visibility applied (an
    /// agent's own entry included).
    fn reachable_agents(&self, sender: &Path) -> Vec<LocalAgent>;

    /// The hosted agent a message to `recipient` (a handle or DID) at `address` (an inbox URL
    /// of this runtime, or none) goes to, whatever its visibility; `None` when the recipient
    /// is not hosted here.
    fn find(&self, recipient: &str, address: Option<&str>) -> Option<LocalAgent>;

    /// The inbox URL this runtime serves `handle` at, when it serves one.
    fn inbox_url(&self, handle: &str) -> Option<String>;

    /// Delivers `message` to the hosted agent `target`, sent by the agent whose file is
    /// `sender`. Never waits for the target's worker.
    fn deliver(
        &self,
        target: &LocalAgent,
        sender: &Path,
        message: Value,
    ) -> BoxFuture<'static, Delivery>;

    /// Starts hosting the agent file at `path` (a child `sys_create_adf` just made with
    /// `autostart`), without waiting for it to load; why not when it cannot. The default is
    /// a runtime that cannot host another agent.
    fn start_agent(&self, path: &Path) -> Result<(), String> {
        let _ = path;
        Err("this runtime cannot start another agent from a tool".to_owned())
    }

    /// Signed cards of agents on LAN peers (`agent_discover {scope: "all"}`), each with
    /// `visibility`, `in_subdirectory` and `source` set; none where the runtime does no LAN
    /// discovery.
    fn lan_cards(&self) -> Vec<Value> {
        Vec::new()
    }

    /// A number that changes whenever the hosted agents change (loads, unloads), so a caller
    /// can skip listing them again while it holds (`mesh_updates`); `None` when the mesh
    /// keeps none, and then every caller lists.
    fn roster_version(&self) -> Option<u64> {
        None
    }

    /// Whether this runtime runs channel adapters: only then is a `type:id` recipient
    /// (`telegram:123`, MSG-22) routed to [`Mesh::deliver_to_adapter`]. The default is a
    /// runtime that runs none.
    fn hosts_adapters(&self) -> bool {
        false
    }

    /// Delivers `message` through the channel adapter of the agent whose file is `sender`
    /// (its type is the recipient's prefix). `delivered` when the platform accepted it; a
    /// failure carries the platform's reason (§11.2).
    fn deliver_to_adapter(
        &self,
        sender: &Path,
        message: AdapterMessage,
    ) -> BoxFuture<'static, Delivery> {
        let _ = (sender, message);
        Box::pin(async { Delivery::failed(None, "this runtime runs no channel adapters") })
    }

    /// `chat_info` (MSG-48) through the running adapter `adapter` of the agent whose file is
    /// `sender`: the chat's metadata, or `{supported: false, reason}` when no such adapter
    /// runs. `Err` is the platform's refusal. The default is a runtime that runs no adapters.
    fn chat_info(
        &self,
        sender: &Path,
        request: ChatInfoRequest,
    ) -> BoxFuture<'static, Result<Value, String>> {
        let _ = (sender, request);
        Box::pin(async {
            Ok(serde_json::json!({
                "supported": false,
                "reason": "this runtime runs no channel adapters (only the daemon runs them)",
            }))
        })
    }

    /// Delivers `message` over a WebSocket the agent `sender_id` (its config id) holds open
    /// to `recipient` (a DID), when it holds one: §12.2's transport order is same runtime,
    /// open WebSocket, HTTP POST. `None` (the default) when there is no such socket.
    fn deliver_over_socket(
        &self,
        sender_id: &str,
        recipient: &str,
        message: &Value,
    ) -> Option<BoxFuture<'static, Delivery>> {
        let _ = (sender_id, recipient, message);
        None
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn tiers_nest_and_directory_needs_an_ancestor_directory() {
        let target = Path::new("/agents/team/worker.adf");
        let parent = Origin::SameRuntime {
            sender: "/agents/lead.adf".into(),
        };
        let sibling = Origin::SameRuntime {
            sender: "/other/x.adf".into(),
        };
        assert!(Tier::Directory.admits(&parent, target));
        assert!(!Tier::Directory.admits(&sibling, target));
        assert!(Tier::Localhost.admits(&sibling, target));
        assert!(!Tier::Localhost.admits(&Origin::Lan, target));
        assert!(Tier::Lan.admits(&Origin::Loopback, target));
        assert!(Tier::Public.admits(&Origin::Public, target));
        assert!(!Tier::Off.admits(&parent, target));
    }

    #[test]
    fn peers_are_classified_by_address() {
        assert_eq!(
            Origin::of_peer("127.0.0.1".parse().unwrap()),
            Origin::Loopback
        );
        assert_eq!(Origin::of_peer("::1".parse().unwrap()), Origin::Loopback);
        assert_eq!(Origin::of_peer("192.168.1.9".parse().unwrap()), Origin::Lan);
        assert_eq!(Origin::of_peer("100.64.0.1".parse().unwrap()), Origin::Lan);
        assert_eq!(Origin::of_peer("8.8.8.8".parse().unwrap()), Origin::Public);
        assert_eq!(
            Origin::of_peer("::ffff:127.0.0.1".parse().unwrap()),
            Origin::Loopback
        );
    }
}
