//! What a new file holds (spec §14): the default config, the reserved files, and the
//! deterministic choices the spec leaves to the runtime (id, icon, handle).

use rand::RngExt as _;
use serde_json::{Value, json};

/// One default tool declaration (§14.3): `(name, enabled, visible, restricted)`.
pub type ToolDefault = (&'static str, bool, bool, bool);

/// The default tool declarations in the order the reference writes them (§14.3, §17.2 #9).
pub const DEFAULT_TOOLS: [ToolDefault; 46] = [
    ("fs_read", true, true, false),
    ("fs_write", true, true, false),
    ("fs_list", true, true, false),
    ("fs_delete", false, false, false),
    ("msg_send", true, true, false),
    ("agent_discover", true, true, false),
    ("msg_list", true, true, false),
    ("msg_read", true, true, false),
    ("msg_update", true, true, false),
    ("chat_info", true, false, false),
    ("sys_code", true, true, false),
    ("sys_lambda", true, true, false),
    ("sys_set_timer", true, true, false),
    ("sys_list_timers", true, true, false),
    ("sys_delete_timer", true, true, false),
    ("sys_get_config", true, true, false),
    ("sys_update_config", true, true, true),
    ("sys_create_adf", false, false, true),
    ("db_query", true, true, false),
    ("db_execute", false, false, false),
    ("loop_compact", false, false, false),
    ("loop_clear", false, false, false),
    ("loop_send", true, true, false),
    ("loop_list", true, true, false),
    ("loop_manage", true, true, false),
    ("msg_delete", false, false, false),
    ("say", true, true, false),
    ("ask", true, true, false),
    ("sys_set_state", true, true, false),
    ("sys_get_meta", true, true, false),
    ("sys_set_meta", true, true, false),
    ("sys_delete_meta", true, true, false),
    ("sys_fetch", true, true, false),
    ("adf_shell", false, false, false),
    ("ws_connect", false, false, false),
    ("ws_disconnect", false, false, false),
    ("ws_connections", false, false, false),
    ("ws_send", false, false, false),
    ("stream_bind", false, false, false),
    ("stream_unbind", false, false, false),
    ("stream_bindings", false, false, false),
    ("fs_transfer", false, false, false),
    ("compute_exec", false, false, true),
    ("mcp_install", false, false, false),
    ("mcp_restart", false, false, false),
    ("mcp_uninstall", false, false, false),
];

/// Tools a new file does not declare (§14.3: templates may) but an owner may switch on with
/// `tools.NAME.…`: the edit declares them with these defaults first.
pub const DECLARED_ON_DEMAND: [ToolDefault; 2] = [
    ("npm_install", false, false, false),
    ("npm_uninstall", false, false, false),
];

/// The eleven trigger types (§7.1) in the order new files list them.
pub const TRIGGER_TYPES: [&str; 11] = [
    "on_inbox",
    "on_outbox",
    "on_file_change",
    "on_chat",
    "on_timer",
    "on_tool_call",
    "on_task_create",
    "on_task_complete",
    "on_logs",
    "on_llm_call",
    "on_startup",
];

/// The JSON of one default tool declaration; `restricted` is written only when true,
/// as the reference does.
pub fn tool_declaration(&(name, enabled, visible, restricted): &ToolDefault) -> Value {
    let mut decl = json!({ "name": name, "enabled": enabled, "visible": visible });
    if restricted {
        decl["restricted"] = Value::Bool(true);
    }
    decl
}

/// The default declaration of a built-in tool, if it has one.
pub fn default_tool(name: &str) -> Option<&'static ToolDefault> {
    DEFAULT_TOOLS.iter().find(|t| t.0 == name)
}

/// The default trigger set (§14.2).
pub fn default_triggers() -> Value {
    json!({
        "on_inbox": { "enabled": true, "targets": [{ "scope": "agent" }] },
        "on_outbox": { "enabled": false, "targets": [] },
        "on_file_change": {
            "enabled": true,
            "targets": [{ "scope": "agent", "filter": { "watch": "README.*" }, "debounce_ms": 2000 }]
        },
        "on_chat": { "enabled": true, "targets": [{ "scope": "agent" }] },
        "on_timer": { "enabled": true, "targets": [{ "scope": "system" }, { "scope": "agent" }] },
        "on_tool_call": { "enabled": false, "targets": [] },
        "on_task_create": { "enabled": false, "targets": [] },
        "on_task_complete": { "enabled": true, "targets": [{ "scope": "agent" }] },
        "on_logs": { "enabled": false, "targets": [] },
        "on_llm_call": { "enabled": false, "targets": [] },
        "on_startup": { "enabled": false, "targets": [] }
    })
}

/// Everything a new agent's config needs to know that is not a default.
#[derive(Debug, Clone)]
pub struct NewAgent<'a> {
    /// The agent id (a nanoid unless the caller fixed one).
    pub id: &'a str,
    /// Display name.
    pub name: &'a str,
    /// The agent's handle, used in its address.
    pub handle: &'a str,
    /// The free-text description shown on the agent card.
    pub description: &'a str,
    /// Creation time as an ISO-8601 timestamp, stamped into the config and metadata.
    pub now_iso: &'a str,
}

/// The config of a new file (§14.1), in the reference's field order.
pub fn default_config(agent: &NewAgent<'_>) -> Value {
    let tools: Vec<Value> = DEFAULT_TOOLS.iter().map(tool_declaration).collect();
    json!({
        "adf_version": crate::schema::FORMAT_VERSION,
        "id": agent.id,
        "name": agent.name,
        "description": agent.description,
        "icon": icon_for_id(agent.id),
        "handle": agent.handle,
        "state": "active",
        "autonomous": false,
        "autostart": false,
        "model": { "provider": "", "model_id": "", "temperature": 0.7, "max_tokens": 4096 },
        "instructions": "",
        "context": {
            "audit": { "loop": true, "inbox": false, "outbox": false, "files": false },
            "dynamic_instructions": {
                "inbox_hints": true, "context_warning": true, "idle_reminder": true, "mesh_updates": true
            }
        },
        "tools": tools,
        "triggers": default_triggers(),
        "security": { "allow_unsigned": true, "level": 1 },
        "limits": {
            "execution_timeout_ms": 60000,
            "max_file_read_tokens": 30000,
            "max_file_write_bytes": 5000000,
            "max_tool_result_tokens": 16000,
            "max_tool_result_preview_chars": 5000,
            "max_active_turns": null,
            "max_image_size_bytes": 5242880,
            "max_audio_size_bytes": 10485760,
            "max_video_size_bytes": 20971520
        },
        "recovery": { "auto_retry": true, "max_attempts": 5, "base_delay_ms": 15000, "max_delay_ms": 300000 },
        "messaging": { "receive": true, "mode": "proactive", "visibility": "localhost", "inbox_mode": true },
        "code_execution": {
            "model_invoke": true, "sys_lambda": true, "task_resolve": true, "loop_inject": true,
            "identity_status": true, "get_identity": true, "set_identity": true, "emit_event": true,
            "attestation_list": true, "attestation_add": true, "attestation_issue": true,
            "network": false, "restricted_methods": ["attestation_issue"]
        },
        "compute": { "enabled": false },
        "logging": { "default_level": "info", "rules": [], "max_rows": 10000 },
        "mcp": { "servers": [] },
        "adapters": {},
        "serving": { "shared": { "enabled": false, "patterns": [] }, "public": { "enabled": false }, "api": [] },
        "ws_connections": [],
        "stream_bind": {},
        "stream_bindings": [],
        "providers": [],
        "locked_fields": [],
        "card": { "endpoints": {} },
        "metadata": { "created_at": agent.now_iso, "updated_at": agent.now_iso }
    })
}

/// A reserved file (§4.1) and the content a new file gets.
#[derive(Debug, Clone)]
pub struct ReservedFile {
    /// Path in the virtual filesystem.
    pub path: &'static str,
    /// The content a newly created file gets.
    pub content: String,
}

/// The four core files every agent has, all created `no_delete` (§4.1, §14.1).
pub const CORE_FILES: [&str; 4] = ["README.md", "mind.md", "mind/log.md", "soul.md"];

/// The initial `mind.md`: an empty index of memory pages, read on every turn.
pub const MIND_SKELETON: &str = "# Mind\n\n\
This index is read on every turn, so keep it short: one line per page, details live under `mind/`.\n\n\
## Always\n\n\
<!-- Facts and rules that must be in view on every turn. -->\n\n\
## Pages\n\n\
<!-- - [Title](mind/page.md): what the page holds and when to read it. -->\n";

/// The initial `mind/log.md`: the change log of memory pages, newest first.
pub const MIND_LOG: &str = "# Mind Log\n\n\
<!-- Newest first. Add an entry whenever a page under mind/ changes:\n\
## [YYYY-MM-DD] ingest|update|lint | title\n\
One or two lines on what changed and why. -->\n";

/// The initial `soul.md`: the agent's persona, filled in by the owner.
pub const SOUL: &str = "# Soul\n\n\
How this agent sounds. Replace this text with concrete rules and short samples of real writing;\n\
adjectives alone do not shape a voice.\n\n\
- Say the answer first, then the reasoning that matters.\n\
- Plain words over jargon; short sentences over long ones.\n\
- When unsure, say so and say what would settle it.\n";

/// The primary document of a new agent (§14.1).
pub fn readme(name: &str, date: &str) -> String {
    format!("# {name}\n\nCreated: {date}\nStatus: New agent, self-configuring.\n")
}

/// The content of a core file for a new agent, by path.
pub fn core_file_content(path: &str, name: &str, date: &str) -> Option<String> {
    match path {
        "README.md" => Some(readme(name, date)),
        "mind.md" => Some(MIND_SKELETON.to_owned()),
        "mind/log.md" => Some(MIND_LOG.to_owned()),
        "soul.md" => Some(SOUL.to_owned()),
        _ => None,
    }
}

const NANOID_ALPHABET: &[u8; 64] =
    b"_-0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";

/// A 12-character nanoid over the URL-safe alphabet (§5.2).
pub fn new_agent_id() -> String {
    random_id(12)
}

/// A random id of `len` URL-safe characters, as nanoid makes them.
pub fn random_id(len: usize) -> String {
    let mut rng = rand::rng();
    (0..len)
        .map(|_| char::from(NANOID_ALPHABET[rng.random_range(0..NANOID_ALPHABET.len())]))
        .collect()
}

/// Icons an agent may get. Animals and objects that render in every common emoji font.
const ICONS: [&str; 48] = [
    "🦊", "🦉", "🐙", "🦋", "🐢", "🦔", "🐝", "🦜", "🐬", "🦡", "🐧", "🦎", "🐳", "🦩", "🐿️", "🦦",
    "🐞", "🦀", "🐼", "🦁", "🐯", "🐨", "🐸", "🦒", "🦓", "🐘", "🦘", "🦥", "🦚", "🦢", "🐺", "🦈",
    "🌵", "🌻", "🍄", "🌲", "⭐", "🌙", "🔭", "🧭", "📡", "🛰️", "🧪", "📚", "🗺️", "🎛️", "🧩", "🔬",
];

/// The icon chosen for an agent id (§5.2: any deterministic function of the id conforms).
/// FNV-1a keeps it stable across platforms and releases, unlike `std`'s hasher.
pub fn icon_for_id(id: &str) -> &'static str {
    let hash = id.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    ICONS[(hash % ICONS.len() as u64) as usize]
}

/// The handle derived from a name (§14.1): lowercase, runs of anything but `[a-z0-9]`
/// become `-`, trimmed, at most 64 characters, `untitled` when nothing is left.
pub fn handle_from_name(name: &str) -> String {
    let mut handle = String::with_capacity(name.len());
    for c in name.chars().flat_map(char::to_lowercase) {
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            handle.push(c);
        } else if !handle.ends_with('-') {
            handle.push('-');
        }
    }
    let trimmed: String = handle.trim_matches('-').chars().take(64).collect();
    let trimmed = trimmed.trim_end_matches('-');
    if trimmed.is_empty() {
        "untitled".to_owned()
    } else {
        trimmed.to_owned()
    }
}

/// The agent name a file path suggests: the file stem.
pub fn name_from_path(path: &std::path::Path) -> String {
    path.file_stem()
        .and_then(|s| s.to_str())
        .filter(|s| !s.trim().is_empty())
        .map_or_else(|| "Untitled Agent".to_owned(), |s| s.trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_are_slugs() {
        assert_eq!(handle_from_name("My Agent"), "my-agent");
        assert_eq!(handle_from_name("  --Hello,  World!!  "), "hello-world");
        assert_eq!(handle_from_name("日本"), "untitled");
        assert_eq!(handle_from_name(&"a".repeat(80)).len(), 64);
    }

    #[test]
    fn ids_are_nanoids() {
        let id = new_agent_id();
        assert_eq!(id.len(), 12);
        assert!(id.bytes().all(|b| NANOID_ALPHABET.contains(&b)));
        assert_ne!(id, new_agent_id());
    }

    #[test]
    fn icon_is_a_function_of_the_id() {
        assert_eq!(icon_for_id("abc"), icon_for_id("abc"));
        let distinct: std::collections::HashSet<_> =
            (0..200).map(|i| icon_for_id(&format!("id{i}"))).collect();
        assert!(distinct.len() > 20, "icons should spread over the set");
    }

    #[test]
    fn default_tools_have_unique_names() {
        let names: std::collections::HashSet<_> = DEFAULT_TOOLS.iter().map(|t| t.0).collect();
        assert_eq!(names.len(), DEFAULT_TOOLS.len());
    }
}
