//! Protection: what each level guards against and whom it binds, decided here only (§4.2 file
//! protection, §4.4 meta protection, §5.17 step 9 config locks, locked timers, and which tables
//! agent SQL may read and write under `security.table_protections`, §10.3 and §5.6). Store
//! writes ask [`decide`] and act on its [`Decision`]; the runtime's tools ask [`config_lock`]
//! and [`decide`] before planning a config change; agent SQL's authorizer (`sql.rs`) asks
//! [`agent_sql_may_read`], [`is_agent_table`] and [`decide_table_write`]; so no other module
//! or crate compares protection levels.
//!
//! Principal types: [`Protection`], [`FileProtection`], [`MetaProtection`], [`Decision`],
//! [`TableProtection`], [`TableDecision`].

use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ValueRef};
use serde::Serialize;
use serde_json::Value;

use std::collections::BTreeMap;

use crate::AdfFile;
use crate::access::Caller;
use crate::config::{ConfigAction, Segment};
use crate::error::{Result, StoreError};

/// Protection level of a file (§4.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FileProtection {
    /// Agent tools may neither write nor delete the file.
    ReadOnly,
    /// Agent tools may write the file but not delete it.
    NoDelete,
    /// No protection: agent tools may write and delete the file.
    None,
}

impl FileProtection {
    /// The level as `adf_files.protection` stores it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ReadOnly => "read_only",
            Self::NoDelete => "no_delete",
            Self::None => "none",
        }
    }

    /// Parses a stored or requested level; anything else is invalid input.
    pub fn parse(text: &str) -> Result<Self> {
        match text {
            "read_only" => Ok(Self::ReadOnly),
            "no_delete" => Ok(Self::NoDelete),
            "none" => Ok(Self::None),
            other => Err(StoreError::invalid(format!(
                "file protection must be read_only, no_delete or none, not '{other}'"
            ))),
        }
    }
}

/// Protection of a meta key (§4.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MetaProtection {
    /// Agent tools may change and delete the key.
    None,
    /// Agent tools may not change or delete the key.
    Readonly,
    /// Agent tools may only replace the value with a strictly greater number.
    Increment,
}

impl MetaProtection {
    /// The level as `adf_meta.protection` stores it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Readonly => "readonly",
            Self::Increment => "increment",
        }
    }

    /// Parses a stored or requested level; anything else is invalid input.
    pub fn parse(text: &str) -> Result<Self> {
        match text {
            "none" => Ok(Self::None),
            "readonly" => Ok(Self::Readonly),
            "increment" => Ok(Self::Increment),
            other => Err(StoreError::invalid(format!(
                "meta protection must be none, readonly or increment, not '{other}'"
            ))),
        }
    }
}

/// A protection level of anything the store guards, as one type: what a refusal names
/// ([`StoreError::Protected`]) and what [`decide`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protection {
    /// A file's level.
    File(FileProtection),
    /// A meta key's level.
    Meta(MetaProtection),
    /// A config path the owner locked (`locked`, `locked_fields`, or always locked).
    ConfigLocked,
    /// A timer the owner locked.
    TimerLocked,
}

impl Protection {
    /// The level as the spec spells it (`read_only`, `readonly`, `increment`, `locked`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::File(level) => level.as_str(),
            Self::Meta(level) => level.as_str(),
            Self::ConfigLocked | Self::TimerLocked => "locked",
        }
    }

    /// Whether this level guards anything at all.
    pub fn guards(self) -> bool {
        !matches!(
            self,
            Self::File(FileProtection::None) | Self::Meta(MetaProtection::None)
        )
    }
}

macro_rules! spelled_as_str {
    ($($level:ty),*) => {$(
        impl std::fmt::Display for $level {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl PartialEq<str> for $level {
            fn eq(&self, other: &str) -> bool {
                self.as_str() == other
            }
        }

        impl PartialEq<&str> for $level {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }
    )*};
}
spelled_as_str!(Protection, FileProtection, MetaProtection);

impl Serialize for Protection {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl FromSql for FileProtection {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        FileProtection::parse(value.as_str()?).map_err(|e| FromSqlError::Other(Box::new(e)))
    }
}

impl FromSql for MetaProtection {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        MetaProtection::parse(value.as_str()?).map_err(|e| FromSqlError::Other(Box::new(e)))
    }
}

/// The change a protection is asked about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Writing the guarded thing (a file's content, a meta value, a config path).
    Write,
    /// Deleting it. `owner_confirmed` is the owner's `force`: the owner may delete anything,
    /// but a protected file only when they say they mean it.
    Delete {
        /// The owner confirmed the delete (`adf rm --force`, `force=true`).
        owner_confirmed: bool,
    },
}

/// What a protection does to one change by one caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// The protection does not stop this caller: the change goes ahead.
    Allow,
    /// The change goes ahead past the protection, and the bypass is recorded
    /// (`protection/bypass` log, `⚠ protection override` marker).
    Bypass,
    /// The change goes ahead only when it raises the stored number (an `increment` key).
    OnlyIncrease,
    /// The change is refused.
    Refuse,
}

/// Whether `caller` may make `change` to something guarded by `protection`.
pub fn decide(caller: Caller, protection: Protection, change: Change) -> Decision {
    if !protection.guards() {
        return Decision::Allow;
    }
    let bound = caller.is_bound_by_protection();
    match (protection, change) {
        // A locked timer is the owner's alone: the tools guide gives locks human-only
        // semantics, so neither authorized code nor a one-time approval lifts it.
        (Protection::TimerLocked, _) if caller == Caller::Owner => Decision::Allow,
        (Protection::TimerLocked, _) => Decision::Refuse,
        (_, Change::Delete { owner_confirmed }) if caller == Caller::Owner => {
            if owner_confirmed || !matches!(protection, Protection::File(_)) {
                Decision::Allow
            } else {
                Decision::Refuse
            }
        }
        (_, _) if bound => match (protection, change) {
            (Protection::Meta(MetaProtection::Increment), Change::Write) => Decision::OnlyIncrease,
            (Protection::File(FileProtection::NoDelete), Change::Write) => Decision::Allow,
            _ => Decision::Refuse,
        },
        (Protection::File(FileProtection::NoDelete), Change::Write) => Decision::Allow,
        // An owner-approved one-time override of a config lock is recorded like authorized
        // code's: the lock named the path, and the log says who went past it.
        (Protection::ConfigLocked, _) if caller == Caller::OwnerApproved => Decision::Bypass,
        _ if caller.records_bypass() => Decision::Bypass,
        _ => Decision::Allow,
    }
}

/// Paths locked for every agent in addition to `locked_fields` (§5.6, §5.23, and
/// `serving.csp_sandbox`: whether the agent's pages run in an opaque origin is the owner's
/// call, README "Agents on the network").
pub const ALWAYS_LOCKED: [&str; 3] = [
    "security.allow_local_fetch",
    "stream_bind",
    "serving.csp_sandbox",
];

/// What the config locks say of one change to a config path (§5.17 step 9).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigLock {
    /// No lock covers the change.
    Free,
    /// A lock covers it: the sentence explains which; the owner may lift it once
    /// (see [`decide`] with [`Protection::ConfigLocked`]).
    Locked(String),
    /// The change would replace or remove a locked array element, or replace a value that
    /// holds one: refused for every agent, with no approval path (seed §5.17).
    Refused(String),
}

fn is_locked(value: Option<&Value>) -> bool {
    value.and_then(|v| v.get("locked")).and_then(Value::as_bool) == Some(true)
}

/// Whether any array element below `value` (or `value`'s own elements) is locked.
fn holds_locked_element(value: &Value) -> bool {
    match value {
        Value::Array(items) => items
            .iter()
            .any(|item| is_locked(Some(item)) || holds_locked_element(item)),
        Value::Object(map) => map.values().any(holds_locked_element),
        _ => false,
    }
}

/// Whether any object strictly below `value` is locked.
fn holds_locked_object(value: &Value) -> bool {
    let locked_or_holds = |child: &Value| is_locked(Some(child)) || holds_locked_object(child);
    match value {
        Value::Array(items) => items.iter().any(locked_or_holds),
        Value::Object(map) => map.values().any(locked_or_holds),
        _ => false,
    }
}

/// The name a path uses for an array element: its `name`, else its `id`.
fn element_label(element: &Value) -> Option<String> {
    ["name", "id"]
        .iter()
        .find_map(|k| element.get(*k).and_then(Value::as_str))
        .map(str::to_owned)
}

/// §5.17 step 9: which lock, if any, covers `action` at the `resolved` path of `config` (the
/// config before the change).
pub fn config_lock(config: &Value, resolved: &[Segment], action: &ConfigAction) -> ConfigLock {
    let mut locked_paths: Vec<String> = config
        .get("locked_fields")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect();
    locked_paths.extend(ALWAYS_LOCKED.iter().map(|p| (*p).to_owned()));

    // Walk the path once: its name form (array elements by name or id, unnamed indices
    // skipped) and the first locked object above the target.
    let mut named: Vec<String> = Vec::new();
    let mut locked_above = None;
    let mut node = Some(config);
    for (position, segment) in resolved.iter().enumerate() {
        let next = match (node, segment) {
            (Some(Value::Object(map)), Segment::Key(key)) => map.get(key),
            (Some(Value::Array(items)), Segment::Index(i)) => items.get(*i),
            _ => None,
        };
        match segment {
            Segment::Key(key) => named.push(key.clone()),
            Segment::Index(_) => named.extend(next.and_then(element_label)),
        }
        if position + 1 < resolved.len() && locked_above.is_none() && is_locked(next) {
            locked_above = Some(named.join("."));
        }
        node = next;
    }
    let target = node;
    let written = named.join(".");
    let replaces_element = matches!(resolved.last(), Some(Segment::Index(_)));

    match action {
        ConfigAction::Set if replaces_element && is_locked(target) => {
            return ConfigLock::Refused(format!(
                "'{written}' is locked: a locked element cannot be replaced"
            ));
        }
        ConfigAction::Set if target.is_some_and(holds_locked_element) => {
            return ConfigLock::Refused(format!(
                "'{written}' holds locked elements and cannot be replaced; use append/remove or change unlocked fields"
            ));
        }
        ConfigAction::Remove { index } => {
            let element = target
                .and_then(Value::as_array)
                .and_then(|items| items.get(*index));
            if element.is_some_and(|e| is_locked(Some(e)) || holds_locked_element(e)) {
                return ConfigLock::Refused(format!(
                    "element {index} of '{written}' is locked and cannot be removed"
                ));
            }
        }
        _ => {}
    }

    for end in 1..=named.len() {
        let prefix = named[..end].join(".");
        if locked_paths.contains(&prefix) {
            return ConfigLock::Locked(format!("'{prefix}' is locked."));
        }
    }
    if *action != ConfigAction::Append {
        let below = format!("{written}.");
        if let Some(child) = locked_paths.iter().find(|p| p.starts_with(&below)) {
            return ConfigLock::Locked(format!(
                "'{written}' contains the locked field '{child}'; update its other fields individually."
            ));
        }
    }
    if let Some(item) = locked_above {
        return ConfigLock::Locked(format!("'{item}' is locked."));
    }
    if *action == ConfigAction::Set
        && (is_locked(target) || target.is_some_and(holds_locked_object))
    {
        return ConfigLock::Locked(format!("'{written}' is locked or holds locked items."));
    }
    ConfigLock::Free
}

// ---------------------------------------------------------------------------------------------
// Agent SQL's tables (§10.3, §5.6).
// ---------------------------------------------------------------------------------------------

/// System tables the tools guide lets `db_query` read.
pub const READABLE_SYSTEM_TABLES: [&str; 8] = [
    "adf_loop",
    "adf_inbox",
    "adf_outbox",
    "adf_timers",
    "adf_files",
    "adf_audit",
    "adf_logs",
    "adf_tasks",
];

/// SQLite's own schema tables: names and DDL only, so the schema stays visible.
pub(crate) const SCHEMA_TABLES: [&str; 4] = [
    "sqlite_master",
    "sqlite_schema",
    "sqlite_temp_master",
    "sqlite_temp_schema",
];

/// Bookkeeping tables that hold no agent data.
const BOOKKEEPING_TABLES: [&str; 3] = ["sqlite_sequence", "sqlite_stat1", "sqlite_stat4"];

/// Whether `table` (lowercased) is the agent's own (`local_*`): the only tables agent SQL
/// creates, writes and drops.
pub fn is_agent_table(table: &str) -> bool {
    table.starts_with("local_")
}

/// Whether agent SQL may read the table `table` (lowercased): the agent's own, the
/// [`READABLE_SYSTEM_TABLES`], and SQLite's schema and bookkeeping tables. Everything else is
/// refused: `adf_meta`, `adf_config`, `adf_identity`, and also `adf_attestations`, which the
/// tools guide's list of queryable tables omits. (Table-valued functions are `sql.rs`'s.)
pub fn agent_sql_may_read(table: &str) -> bool {
    is_agent_table(table)
        || READABLE_SYSTEM_TABLES.contains(&table)
        || SCHEMA_TABLES.contains(&table)
        || BOOKKEEPING_TABLES.contains(&table)
}

/// A `security.table_protections` level (§5.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableProtection {
    /// Agent statements may read and write the table freely.
    None,
    /// Rows may be inserted but never updated, deleted or replaced.
    AppendOnly,
    /// Only authorized code may write the table.
    Authorized,
}

impl TableProtection {
    /// The level a config value names; anything unknown protects the most.
    pub(crate) fn from_config(value: &Value) -> Self {
        match value {
            Value::Null => Self::None,
            Value::String(level) if level == "none" => Self::None,
            Value::String(level) if level == "append_only" => Self::AppendOnly,
            _ => Self::Authorized,
        }
    }

    /// The level as `security.table_protections` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::AppendOnly => "append_only",
            Self::Authorized => "authorized",
        }
    }
}

/// A write of agent SQL to one of the agent's tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableWrite {
    /// `INSERT` (or `REPLACE`) of rows.
    Insert,
    /// `UPDATE` of rows.
    Update,
    /// `DELETE` of rows.
    Delete,
    /// `DROP TABLE`.
    Drop,
}

impl TableWrite {
    /// The write as a refusal names it ("update", "delete from").
    pub fn verb(self) -> &'static str {
        match self {
            Self::Insert => "insert into",
            Self::Update => "update",
            Self::Delete => "delete from",
            Self::Drop => "drop",
        }
    }
}

/// What a table's protection does to one agent SQL write by one caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableDecision {
    /// The write goes ahead.
    Allow,
    /// An insert into an `append_only` table: it goes ahead, and is refused after all if it
    /// replaced a row (conflict resolution, caught by counting rows).
    AllowUnlessRowsReplaced,
    /// Authorized code writes an `authorized` table: it goes ahead and the bypass is logged.
    Bypass,
    /// An `append_only` table refuses an update, delete or drop.
    RefuseAppendOnly,
    /// An `authorized` table refuses every caller but authorized code and the owner.
    RequiresAuthorizedCode,
}

/// Whether `caller`'s agent SQL may make `write` to a table protected at `level`. The owner
/// passes every level.
pub fn decide_table_write(
    caller: Caller,
    level: TableProtection,
    write: TableWrite,
) -> TableDecision {
    match level {
        TableProtection::None => TableDecision::Allow,
        _ if caller == Caller::Owner => TableDecision::Allow,
        TableProtection::AppendOnly if write == TableWrite::Insert => {
            TableDecision::AllowUnlessRowsReplaced
        }
        TableProtection::AppendOnly => TableDecision::RefuseAppendOnly,
        TableProtection::Authorized if caller == Caller::AuthorizedCode => TableDecision::Bypass,
        TableProtection::Authorized => TableDecision::RequiresAuthorizedCode,
    }
}

impl AdfFile {
    /// The `security.table_protections` map of the config, names lowercased.
    pub fn table_protections(&self) -> Result<BTreeMap<String, TableProtection>> {
        let config = self.config()?;
        Ok(config
            .pointer("/security/table_protections")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .map(|(table, level)| {
                (
                    table.to_ascii_lowercase(),
                    TableProtection::from_config(level),
                )
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EVERY_CALLER: [Caller; 4] = [
        Caller::Agent,
        Caller::AuthorizedCode,
        Caller::Owner,
        Caller::OwnerApproved,
    ];

    #[test]
    fn an_unguarded_level_allows_every_caller_every_change() {
        for caller in EVERY_CALLER {
            for level in [
                Protection::File(FileProtection::None),
                Protection::Meta(MetaProtection::None),
            ] {
                for change in [
                    Change::Write,
                    Change::Delete {
                        owner_confirmed: false,
                    },
                ] {
                    assert_eq!(decide(caller, level, change), Decision::Allow);
                }
            }
        }
    }

    #[test]
    fn each_caller_meets_a_read_only_file_as_the_spec_says() {
        let read_only = Protection::File(FileProtection::ReadOnly);
        let decisions: Vec<Decision> = EVERY_CALLER
            .iter()
            .map(|caller| decide(*caller, read_only, Change::Write))
            .collect();
        assert_eq!(
            decisions,
            [
                Decision::Refuse,
                Decision::Bypass,
                Decision::Allow,
                Decision::Allow
            ]
        );
        let unconfirmed = Change::Delete {
            owner_confirmed: false,
        };
        assert_eq!(
            decide(Caller::Owner, read_only, unconfirmed),
            Decision::Refuse
        );
        assert_eq!(
            decide(
                Caller::Owner,
                read_only,
                Change::Delete {
                    owner_confirmed: true
                }
            ),
            Decision::Allow
        );
        let no_delete = Protection::File(FileProtection::NoDelete);
        assert_eq!(
            decide(Caller::Agent, no_delete, Change::Write),
            Decision::Allow
        );
        assert_eq!(
            decide(Caller::Agent, no_delete, unconfirmed),
            Decision::Refuse
        );
    }

    #[test]
    fn locks_and_increment_keys_bind_as_the_spec_says() {
        let increment = Protection::Meta(MetaProtection::Increment);
        assert_eq!(
            decide(Caller::Agent, increment, Change::Write),
            Decision::OnlyIncrease
        );
        assert_eq!(
            decide(
                Caller::OwnerApproved,
                Protection::ConfigLocked,
                Change::Write
            ),
            Decision::Bypass
        );
        assert_eq!(
            decide(Caller::OwnerApproved, increment, Change::Write),
            Decision::Allow
        );
        for caller in [Caller::Agent, Caller::AuthorizedCode, Caller::OwnerApproved] {
            assert_eq!(
                decide(caller, Protection::TimerLocked, Change::Write),
                Decision::Refuse,
                "{caller:?}"
            );
        }
        assert_eq!(
            decide(Caller::Owner, Protection::TimerLocked, Change::Write),
            Decision::Allow
        );
    }

    #[test]
    fn levels_read_and_print_in_the_spec_spelling() {
        assert_eq!(Protection::File(FileProtection::ReadOnly), "read_only");
        assert_eq!(Protection::Meta(MetaProtection::Readonly), "readonly");
        assert_eq!(Protection::ConfigLocked.to_string(), "locked");
        assert_eq!(
            serde_json::to_value(Protection::Meta(MetaProtection::Increment)).ok(),
            Some(Value::from("increment"))
        );
    }

    #[test]
    fn protection_levels_from_config_fail_closed() {
        assert_eq!(
            TableProtection::from_config(&Value::Null),
            TableProtection::None
        );
        assert_eq!(
            TableProtection::from_config(&"none".into()),
            TableProtection::None
        );
        assert_eq!(
            TableProtection::from_config(&"append_only".into()),
            TableProtection::AppendOnly
        );
        assert_eq!(
            TableProtection::from_config(&"authorized".into()),
            TableProtection::Authorized
        );
        assert_eq!(
            TableProtection::from_config(&"bogus".into()),
            TableProtection::Authorized
        );
    }

    #[test]
    fn table_protections_bind_everyone_but_the_owner() {
        use TableDecision::*;
        for write in [TableWrite::Insert, TableWrite::Update, TableWrite::Drop] {
            for caller in [Caller::Agent, Caller::AuthorizedCode, Caller::Owner] {
                assert_eq!(
                    decide_table_write(caller, TableProtection::None, write),
                    Allow
                );
            }
            let owner = decide_table_write(Caller::Owner, TableProtection::Authorized, write);
            assert_eq!(owner, Allow);
            let code =
                decide_table_write(Caller::AuthorizedCode, TableProtection::Authorized, write);
            assert_eq!(code, Bypass);
            let agent = decide_table_write(Caller::Agent, TableProtection::Authorized, write);
            assert_eq!(agent, RequiresAuthorizedCode);
        }
        let append = |caller, write| decide_table_write(caller, TableProtection::AppendOnly, write);
        assert_eq!(
            append(Caller::Agent, TableWrite::Insert),
            AllowUnlessRowsReplaced
        );
        assert_eq!(
            append(Caller::AuthorizedCode, TableWrite::Delete),
            RefuseAppendOnly
        );
        assert_eq!(append(Caller::Owner, TableWrite::Delete), Allow);
    }

    #[test]
    fn agent_sql_reads_its_own_tables_and_the_listed_system_tables_only() {
        for table in [
            "local_x",
            "adf_loop",
            "adf_tasks",
            "sqlite_master",
            "sqlite_sequence",
        ] {
            assert!(agent_sql_may_read(table), "{table}");
        }
        for table in [
            "adf_meta",
            "adf_config",
            "adf_identity",
            "adf_attestations",
            "foo",
        ] {
            assert!(!agent_sql_may_read(table), "{table}");
        }
    }
}
