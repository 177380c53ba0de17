//! One adapter's config entry (§5.13): `{enabled, config?, policy?: {dm, groups, allow_from},
//! limits?: {max_attachment_size}}`, read from the agent's `adapters.<type>` value, and the
//! inbound policy as one pure function ([`InboundPolicy::admits`]).

use serde_json::{Map, Value};

use crate::error::AdapterError;

/// The attachment limit when `limits.max_attachment_size` is absent (10 MiB, as §5.13's example).
pub const DEFAULT_MAX_ATTACHMENT_SIZE: u64 = 10 * 1024 * 1024;

/// Who may reach the agent in a direct conversation (`policy.dm`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DmPolicy {
    /// Everyone.
    All,
    /// Only senders named in `allow_from`.
    Allowlist,
    /// Nobody: direct messages are dropped.
    None,
}

/// Which group messages reach the agent (`policy.groups`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupPolicy {
    /// Every message in a group the bot is in.
    All,
    /// Only messages that mention the bot (or reply to it).
    Mention,
    /// None.
    None,
}

/// The inbound policy of one adapter, applied before anything is stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboundPolicy {
    /// `policy.dm`; default `all`.
    pub dm: DmPolicy,
    /// `policy.groups`; default `mention`.
    pub groups: GroupPolicy,
    /// `policy.allow_from`: platform user ids or usernames (`@name` or `name`) that `dm:
    /// allowlist` admits. It does not restrict groups: `groups` alone decides them.
    pub allow_from: Vec<String>,
}

/// The sender and the conversation of one inbound message, as the policy sees them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sender {
    /// The platform's user id, as text.
    pub id: String,
    /// The platform username, without `@`, when it has one.
    pub username: Option<String>,
    /// Whether the conversation is a group (else a direct message).
    pub in_group: bool,
    /// Whether the message mentions the bot or replies to one of its messages.
    pub mentions_bot: bool,
}

impl InboundPolicy {
    /// `Ok` when a message from `sender` may be stored, else why not (for the adapter's debug
    /// log; dropped messages leave no row).
    pub fn admits(&self, sender: &Sender) -> Result<(), &'static str> {
        if sender.in_group {
            return match self.groups {
                GroupPolicy::All => Ok(()),
                GroupPolicy::Mention if sender.mentions_bot => Ok(()),
                GroupPolicy::Mention => {
                    Err("policy.groups is mention and the bot is not mentioned")
                }
                GroupPolicy::None => Err("policy.groups is none"),
            };
        }
        match self.dm {
            DmPolicy::All => Ok(()),
            DmPolicy::None => Err("policy.dm is none"),
            DmPolicy::Allowlist if self.allows(sender) => Ok(()),
            DmPolicy::Allowlist => {
                Err("policy.dm is allowlist and the sender is not in allow_from")
            }
        }
    }

    fn allows(&self, sender: &Sender) -> bool {
        self.allow_from.iter().any(|entry| {
            let entry = entry.trim();
            entry == sender.id
                || sender
                    .username
                    .as_deref()
                    .is_some_and(|name| entry.trim_start_matches('@').eq_ignore_ascii_case(name))
        })
    }
}

/// One adapter's validated config entry.
#[derive(Debug, Clone, PartialEq)]
pub struct AdapterSettings {
    /// The adapter type: its key under `adapters`.
    pub kind: String,
    /// `enabled`; an absent flag counts as enabled (the entry itself asks for the adapter).
    pub enabled: bool,
    /// `config`: platform options (Telegram: `api_root`, `poll_timeout`).
    pub config: Map<String, Value>,
    /// `policy`.
    pub policy: InboundPolicy,
    /// `limits.max_attachment_size` in bytes.
    pub max_attachment_size: u64,
}

impl AdapterSettings {
    /// Reads and validates `adapters.<kind>`; an invalid enum or type is an error naming the
    /// field and the allowed values (CFG-49).
    pub fn parse(kind: &str, entry: &Value) -> Result<Self, AdapterError> {
        let bad = |message: String| AdapterError::Config {
            adapter: kind.to_owned(),
            message,
        };
        let Some(entry) = entry.as_object() else {
            return Err(bad("an adapter entry is an object".into()));
        };
        let enabled = match entry.get("enabled") {
            None | Some(Value::Null) => true,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(bad("enabled is true or false".into())),
        };
        let config = match entry.get("config") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(map)) => map.clone(),
            Some(_) => return Err(bad("config is an object".into())),
        };
        let policy = entry.get("policy").and_then(Value::as_object);
        let field = |name: &str| policy.and_then(|p| p.get(name)).filter(|v| !v.is_null());
        let dm = match field("dm").map(|v| v.as_str().ok_or(v)) {
            None => DmPolicy::All,
            Some(Ok("all")) => DmPolicy::All,
            Some(Ok("allowlist")) => DmPolicy::Allowlist,
            Some(Ok("none")) => DmPolicy::None,
            Some(other) => {
                return Err(bad(format!(
                    "policy.dm is all, allowlist or none, not {}",
                    shown(other)
                )));
            }
        };
        let groups = match field("groups").map(|v| v.as_str().ok_or(v)) {
            None => GroupPolicy::Mention,
            Some(Ok("all")) => GroupPolicy::All,
            Some(Ok("mention")) => GroupPolicy::Mention,
            Some(Ok("none")) => GroupPolicy::None,
            Some(other) => {
                return Err(bad(format!(
                    "policy.groups is all, mention or none, not {}",
                    shown(other)
                )));
            }
        };
        let allow_from = match field("allow_from") {
            None => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .map(|item| match item {
                    Value::String(s) => Ok(s.clone()),
                    Value::Number(n) => Ok(n.to_string()),
                    _ => Err(bad("policy.allow_from lists user ids or names".into())),
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(bad("policy.allow_from is an array".into())),
        };
        let max_attachment_size = match entry
            .get("limits")
            .and_then(|l| l.get("max_attachment_size"))
        {
            None | Some(Value::Null) => DEFAULT_MAX_ATTACHMENT_SIZE,
            Some(v) => v
                .as_u64()
                .ok_or_else(|| bad("limits.max_attachment_size is a number of bytes".into()))?,
        };
        Ok(AdapterSettings {
            kind: kind.to_owned(),
            enabled,
            config,
            policy: InboundPolicy {
                dm,
                groups,
                allow_from,
            },
            max_attachment_size,
        })
    }

    /// A string option of `config`.
    pub fn option_str(&self, name: &str) -> Option<&str> {
        self.config.get(name).and_then(Value::as_str)
    }
}

fn shown(value: Result<&str, &Value>) -> String {
    match value {
        Ok(s) => format!("'{s}'"),
        Err(v) => v.to_string(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn cfg_49_policy_enums_outside_the_lists_are_rejected_naming_the_allowed_values() {
        for (field, value, allowed) in [
            ("dm", "everyone", "all, allowlist or none"),
            ("groups", "allowlist", "all, mention or none"),
        ] {
            let entry = json!({ "enabled": true, "policy": { field: value } });
            let err = AdapterSettings::parse("telegram", &entry).unwrap_err();
            assert!(
                err.to_string().contains(allowed) && err.to_string().contains(value),
                "{err}"
            );
        }
        for (dm, groups) in [("all", "all"), ("allowlist", "mention"), ("none", "none")] {
            let entry = json!({ "policy": { "dm": dm, "groups": groups } });
            assert!(
                AdapterSettings::parse("telegram", &entry).is_ok(),
                "{dm}/{groups}"
            );
        }
    }

    #[test]
    fn the_policy_decides_dms_by_allow_from_and_groups_by_mention() {
        let policy = InboundPolicy {
            dm: DmPolicy::Allowlist,
            groups: GroupPolicy::Mention,
            allow_from: vec!["@Alice".into(), "42".into()],
        };
        let sender = |id: &str, name: Option<&str>, in_group, mentions_bot| Sender {
            id: id.into(),
            username: name.map(str::to_owned),
            in_group,
            mentions_bot,
        };
        assert!(
            policy
                .admits(&sender("1", Some("alice"), false, false))
                .is_ok()
        );
        assert!(policy.admits(&sender("42", None, false, false)).is_ok());
        assert!(
            policy
                .admits(&sender("7", Some("mallory"), false, false))
                .is_err()
        );
        assert!(
            policy
                .admits(&sender("7", Some("mallory"), true, true))
                .is_ok()
        );
        assert!(
            policy
                .admits(&sender("1", Some("alice"), true, false))
                .is_err()
        );
    }
}
