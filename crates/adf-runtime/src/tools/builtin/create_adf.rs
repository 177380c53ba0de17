//! Built-in tool `sys_create_adf` (tools guide "sys_create_adf", missing-tables §9): a new
//! agent in a new `.adf` file beside the caller, optionally from a template `.adf` stored in
//! the caller's files. Principal type: [`CreateAdf`] (the tool, with the runtime home whose
//! owner and runtime keys give the child its identity).
//!
//! One call, in this order, so that a refusal costs nothing: parse and place (child path,
//! collisions) → read everything needed from the parent (template bytes, injected files) →
//! read the template through a temporary copy → build the child's config in memory (merge,
//! template locks, validation) → create the child file, provision its identity, write config,
//! files, copied credentials and lineage → close it cleanly. Any failure after the child file
//! exists removes it (and the temporary template copy); the parent is only read, so the call's
//! transaction leaves it as it was.
//!
//! Decisions where the sources leave room:
//! - **Where.** The child is `<dir>/<slug(name)>.adf`, `slug` being the handle rule of §14.1.
//!   `<dir>` is the caller's directory, or `location`: a relative path to an existing directory
//!   at or below the caller's directory (no absolute paths, no `..`, and no symlink leading out
//!   once resolved). The owner approves a name and a relative place; an agent that could write
//!   agent files anywhere on disk (autostart folders, other agents' directories) would hold
//!   more than the owner granted. An existing file (or a leftover `-wal`/`-shm`) is never
//!   overwritten: the call fails and names the collision.
//! - **Merge.** `AGENT_DEFAULTS → template → params`: objects merge key by key at every depth
//!   (so `model: {temperature}` keeps the template's provider), `tools` merge by `name`,
//!   `locked_fields` is the union (locks carry forward), arrays and scalars replace. The child
//!   always gets a fresh `id`, `adf_version` of this runtime, its own `metadata` timestamps,
//!   `name` from the call and `handle` from the call or the slug of the name; the template's
//!   `name`/`handle`/`id` are the template's own and never carried.
//! - **Locks.** A template lock (`locked_fields`, `locked: true` on tools, triggers, trigger
//!   targets and `serving.api` routes) refuses any parameter that writes at, above or below the
//!   locked path, with `WRITE_ERROR` and no approval path (the guide: an error, nothing
//!   created). `name` is the child's own and never an override.
//! - **Validation.** The merged config must pass the same checks `sys_update_config` applies
//!   (its field rules, structural rules and the store's schema), judged against the defaults,
//!   so a bad parameter or template is `INVALID_INPUT` before any file exists.
//! - **Identity.** The child is provisioned with the owner and runtime keys of the runtime home
//!   when the home has an owner (as `adf new` does); otherwise it has no identity yet and the
//!   first open by an installation with an owner provisions it (IDN-02). Template rows copied:
//!   plaintext, non-`crypto:*` only; sealed or password-encrypted rows are skipped. In a
//!   provisioned child they are sealed into its credentials envelope rather than left plain.
//! - **Files.** Template files keep their protection; `authorized` is never carried, because
//!   template bytes can be written by the agent itself, and trust is the owner's to grant
//!   (§4.3). `skills-registry.json` is regenerated, not copied. Injected files overwrite a file
//!   of the same path (keeping its protection) unless it is `read_only`; new ones get `none`.
//!   Only config, files and those identity rows come from the template: its transcripts,
//!   inbox, outbox, timers, tasks, logs, meta and attestations stay behind (§16, POR-07/08).
//! - **Autostart.** `autostart` is stored in the child's config. With a mesh that hosts agents
//!   (the daemon's, [`Mesh::start_agent`]) the child is started at once, before the parent's
//!   turn ends, and the result says `autostarted: true`; elsewhere (the command line) nothing
//!   can host it, so the result says `autostarted: false` and why, and a runtime that starts
//!   `autostart` agents when it loads them starts the child then. A child never needs a
//!   password here (its identity is sealed to the owner and runtime keys), so a start is never
//!   skipped for one.

use std::fs;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use adf_store::defaults::{self, NewAgent};
use adf_store::{AdfFile, CreateOptions, FileEntry, FileWrite, IdentityRow, StoreError, sidecar};
use serde_json::{Map, Value, json};

use super::config::{leaf_error, new_structural};
use crate::home::RuntimeHome;
use crate::identity::{self, IdentityError, LocalKeys, OpenIdentity};
use crate::messaging::Mesh;
use crate::tools::{ErrorCode, Tool, ToolContext, ToolError};

/// The tools of this family.
pub fn tools() -> Vec<Arc<dyn Tool>> {
    vec![Arc::new(CreateAdf::new())]
}

/// Config sections a call may set, with their JSON type (`None`: any). The tools guide's list
/// first, then the rest of `AgentConfig` for the parity the guide promises; `id` and
/// `adf_version` are the runtime's.
const SECTIONS: [(&str, Option<&str>); 36] = [
    ("description", Some("string")),
    ("instructions", Some("string")),
    ("icon", Some("string")),
    ("handle", Some("string")),
    ("autonomous", Some("boolean")),
    ("autostart", Some("boolean")),
    ("start_in_state", Some("string")),
    ("model", Some("object")),
    ("context", Some("object")),
    ("tools", Some("array")),
    ("triggers", Some("object")),
    ("security", Some("object")),
    ("limits", Some("object")),
    ("messaging", Some("object")),
    ("audit", Some("object")),
    ("code_execution", Some("object")),
    ("logging", Some("object")),
    ("mcp", Some("object")),
    ("adapters", Some("object")),
    ("serving", Some("object")),
    ("providers", Some("array")),
    ("ws_connections", Some("array")),
    ("locked_fields", Some("array")),
    ("card", Some("object")),
    ("metadata", Some("object")),
    ("state", Some("string")),
    ("include_base_prompt", Some("boolean")),
    ("bare_prompt", Some("boolean")),
    ("loops", Some("array")),
    ("recovery", Some("object")),
    ("pre_llm_hook", None),
    ("compute", Some("object")),
    ("stream_bind", Some("object")),
    ("stream_bindings", Some("array")),
    ("umbilical", Some("object")),
    ("umbilical_taps", Some("array")),
];

/// Why `autostarted` is false (see the module docs).
const AUTOSTART_NOTE: &str =
    "config.autostart is true, so the runtime starts the agent when it next loads it.";

/// `sys_create_adf`.
#[derive(Debug, Clone, Default)]
pub struct CreateAdf {
    /// Where the owner and runtime keys live; `None` reads `$ADF_HOME` at call time.
    home: Option<RuntimeHome>,
    /// The runtime's hosted agents, which can start an `autostart` child at once.
    mesh: Option<Arc<dyn Mesh>>,
}

impl CreateAdf {
    /// The tool as registered by default: keys from `$ADF_HOME` (else `~/.adf`).
    pub fn new() -> Self {
        Self::default()
    }

    /// The tool with an explicit runtime home (tests, embedding runtimes).
    pub fn with_home(home: RuntimeHome) -> Self {
        Self {
            home: Some(home),
            mesh: None,
        }
    }

    /// The tool of a runtime hosting agents: an `autostart` child starts on `mesh` at once.
    pub fn hosted(mesh: Arc<dyn Mesh>, home: Option<RuntimeHome>) -> Self {
        Self {
            home,
            mesh: Some(mesh),
        }
    }

    /// The keys the child is provisioned with: none when the home has no owner. Never creates
    /// an owner: that is the human's step (`adf owner init`), not a side effect of a tool.
    fn keys(&self) -> Result<Option<LocalKeys>, ToolError> {
        let home = match &self.home {
            Some(home) => home.clone(),
            None => match RuntimeHome::from_env() {
                Ok(home) => home,
                Err(_) => return Ok(None),
            },
        };
        let owner = home.load_owner().map_err(|e| identity_error(e.into()))?;
        if owner.is_none() {
            return Ok(None);
        }
        LocalKeys::from_home(&home)
            .map(Some)
            .map_err(identity_error)
    }
}

/// `sys_create_adf`'s argument schema.
fn arguments_schema() -> Value {
    let mut properties = Map::new();
    properties.insert(
        "name".into(),
        json!({
            "type": "string", "minLength": 1, "maxLength": 100,
            "description": "The new agent's name; its file is <slug of name>.adf."
        }),
    );
    properties.insert(
        "location".into(),
        json!({
            "type": "string", "minLength": 1,
            "description": "An existing directory, relative to yours, to create the file in. Default: your directory."
        }),
    );
    properties.insert(
        "template".into(),
        json!({
            "type": "string", "minLength": 1,
            "description": "Path of a .adf file in your file store to start from."
        }),
    );
    properties.insert(
        "files".into(),
        json!({
            "type": "array",
            "description": "Files copied from your file store into the new agent.",
            "items": {
                "type": "object",
                "properties": {
                    "parent_path": { "type": "string", "minLength": 1 },
                    "child_path": { "type": "string", "minLength": 1 }
                },
                "required": ["parent_path", "child_path"],
                "additionalProperties": false
            }
        }),
    );
    for (section, kind) in SECTIONS {
        let mut schema = Map::new();
        if let Some(kind) = kind {
            schema.insert("type".into(), json!(kind));
        }
        match section {
            "tools" => {
                schema.insert(
                    "items".into(),
                    json!({
                        "type": "object",
                        "properties": { "name": { "type": "string", "minLength": 1 } },
                        "required": ["name"]
                    }),
                );
            }
            "locked_fields" => {
                schema.insert("items".into(), json!({ "type": "string" }));
            }
            _ => {}
        }
        schema.insert(
            "description".into(),
            json!(format!("Overrides config.{section}.")),
        );
        properties.insert(section.into(), Value::Object(schema));
    }
    json!({
        "type": "object",
        "properties": properties,
        "required": ["name"],
        "additionalProperties": false
    })
}

impl Tool for CreateAdf {
    declare_tool! {
        name: "sys_create_adf",
        description: "Create a new agent in its own .adf file, in your directory or in `location` (a \
         subdirectory). Only `name` is required; any AgentConfig section overrides the defaults \
         (tools merge by name, objects merge, arrays replace). `template`: a .adf in your files \
         to start from (its config, files and plaintext credentials; locked fields cannot be \
         overridden). `files`: copy your files into the child as {parent_path, child_path}. \
         Needs your owner's approval.",
        parameters: arguments_schema(),
    }

    fn run(&self, cx: &mut ToolContext<'_>, args: Value) -> Result<Value, ToolError> {
        let request = Request::parse(args)?;
        let dir = target_dir(cx.file.path(), request.location.as_deref())?;
        let slug = defaults::handle_from_name(&request.name);
        let path = dir.join(format!("{slug}.adf"));
        refuse_collision(&path)?;

        // Everything taken from the parent is read before the child exists.
        let template = match &request.template {
            Some(source) => Some(Template::load(cx.file, source, &dir, &slug)?),
            None => None,
        };
        let injected = request
            .files
            .iter()
            .map(|(from, to)| {
                let entry = cx.file.file_read(from)?.ok_or_else(|| {
                    ToolError::not_found(format!("files: no file '{from}' in your file store"))
                })?;
                Ok((to.clone(), entry))
            })
            .collect::<Result<Vec<_>, ToolError>>()?;

        let plan = Plan::build(&request, template.as_ref())?;
        let lineage = match cx.file.meta_get("adf_did")?.map(|e| e.value) {
            Some(did) if !did.is_empty() => did,
            _ => cx
                .config
                .get("id")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
        };
        // Keys before the file, so a home problem never leaves a half-made child behind.
        let keys = self.keys()?;

        let built = build_child(
            &path,
            &plan,
            template.as_ref(),
            &injected,
            &lineage,
            keys.as_ref(),
        )?;

        let autostart = plan.config.get("autostart").and_then(Value::as_bool) == Some(true);
        // The child exists and is closed: a failure to start it is the note, not the call's.
        let not_started = match (autostart, &self.mesh) {
            (false, _) => None,
            (true, Some(mesh)) => mesh.start_agent(&path).err(),
            (true, None) => Some("this runtime cannot start another agent from a tool".to_owned()),
        };
        let mut result = json!({
            "name": request.name,
            "id": plan.id,
            "handle": plan.config.get("handle"),
            "path": path.display().to_string(),
            "parent_did": lineage,
            "files": built.files,
            "autostart": autostart,
            "autostarted": autostart && not_started.is_none(),
        });
        if let Some(object) = result.as_object_mut() {
            if let Some(did) = built.did {
                object.insert("did".into(), Value::String(did));
            }
            if let Some(source) = &request.template {
                object.insert("template".into(), Value::String(source.clone()));
                object.insert(
                    "identity_rows_copied".into(),
                    json!(built.identity_rows_copied),
                );
            }
            if let Some(why) = &not_started {
                object.insert(
                    "autostart_note".into(),
                    Value::String(format!("not started now: {why}. {AUTOSTART_NOTE}")),
                );
            }
        }
        Ok(result)
    }
}

/// The call's arguments, sorted into what places the child and what configures it.
#[derive(Debug)]
struct Request {
    name: String,
    location: Option<String>,
    template: Option<String>,
    /// `(parent_path, child_path)` pairs.
    files: Vec<(String, String)>,
    /// Every config section the call sets.
    overrides: Map<String, Value>,
}

impl Request {
    fn parse(args: Value) -> Result<Self, ToolError> {
        let Value::Object(mut args) = args else {
            return Err(ToolError::invalid("arguments must be an object"));
        };
        let text = |value: Option<Value>| value.and_then(|v| v.as_str().map(str::to_owned));
        let name =
            text(args.remove("name")).ok_or_else(|| ToolError::invalid("name is required"))?;
        let location = text(args.remove("location"));
        let template = text(args.remove("template"));
        let files = match args.remove("files") {
            Some(Value::Array(items)) => items
                .iter()
                .map(|item| {
                    let field =
                        |key: &str| item.get(key).and_then(Value::as_str).map(str::to_owned);
                    match (field("parent_path"), field("child_path")) {
                        (Some(from), Some(to)) => Ok((from, to)),
                        _ => Err(ToolError::invalid(
                            "files: every entry needs parent_path and child_path",
                        )),
                    }
                })
                .collect::<Result<_, _>>()?,
            _ => Vec::new(),
        };
        Ok(Self {
            name,
            location,
            template,
            files,
            overrides: args,
        })
    }
}

/// The directory the child goes in (see the module docs for the rules).
fn target_dir(parent: &Path, location: Option<&str>) -> Result<PathBuf, ToolError> {
    let parent_dir = match parent.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let base = fs::canonicalize(&parent_dir).map_err(|e| {
        ToolError::failed(format!(
            "cannot resolve your own directory {}: {e}",
            parent_dir.display()
        ))
    })?;
    let Some(location) = location else {
        return Ok(base);
    };
    let relative = Path::new(location);
    let escapes = relative
        .components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir));
    if escapes || location.contains('\\') {
        return Err(ToolError::invalid(format!(
            "location '{location}' must be a relative path below your directory, without '..' or a root"
        )));
    }
    let joined = base.join(relative);
    let resolved = fs::canonicalize(&joined).map_err(|_| {
        ToolError::invalid(format!(
            "location '{location}' is not an existing directory below yours"
        ))
    })?;
    if !resolved.starts_with(&base) {
        return Err(ToolError::invalid(format!(
            "location '{location}' leads outside your directory"
        )));
    }
    if !resolved.is_dir() {
        return Err(ToolError::invalid(format!(
            "location '{location}' is not a directory"
        )));
    }
    Ok(resolved)
}

/// Refuses a child path that exists in any form, a dangling symlink included (SQLite would
/// follow it), or that has leftover sidecars a new database would pick up.
fn refuse_collision(path: &Path) -> Result<(), ToolError> {
    for candidate in [
        path.to_path_buf(),
        sidecar(path, "-wal"),
        sidecar(path, "-shm"),
    ] {
        if fs::symlink_metadata(&candidate).is_ok() {
            return Err(ToolError::invalid(format!(
                "{} already exists; choose another name or location",
                candidate.display()
            )));
        }
    }
    Ok(())
}

/// Removes files this call made unless disarmed: the child on failure, the template copy
/// always.
struct Cleanup {
    paths: Vec<PathBuf>,
    /// Also remove `<path>.bak` (the temporary template copy's migration backup; never for the
    /// child, whose `.bak` name could belong to someone else).
    backups: bool,
    armed: bool,
}

impl Cleanup {
    fn new(paths: Vec<PathBuf>, backups: bool) -> Self {
        Self {
            paths,
            backups,
            armed: true,
        }
    }

    fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        for path in &self.paths {
            let mut leftovers = vec![path.clone(), sidecar(path, "-wal"), sidecar(path, "-shm")];
            if self.backups {
                leftovers.push(sidecar(path, ".bak"));
            }
            for leftover in leftovers {
                if let Err(error) = fs::remove_file(&leftover)
                    && error.kind() != std::io::ErrorKind::NotFound
                {
                    tracing::warn!(path = %leftover.display(), %error, "sys_create_adf: cannot remove a partial file");
                }
            }
        }
    }
}

/// What the child takes from a template `.adf`.
#[derive(Debug)]
struct Template {
    config: Value,
    files: Vec<FileEntry>,
    /// Plaintext, non-`crypto:*` identity rows.
    identity: Vec<IdentityRow>,
}

impl Template {
    /// Reads `source` from the parent's files through a temporary copy in `dir`, opened with
    /// the store so an older schema is migrated like any file the runtime opens.
    fn load(parent: &AdfFile, source: &str, dir: &Path, slug: &str) -> Result<Self, ToolError> {
        let entry = parent.file_read(source)?.ok_or_else(|| {
            ToolError::not_found(format!("template: no file '{source}' in your file store"))
        })?;
        let temp = dir.join(format!(
            ".{slug}.template-{}.adf",
            defaults::random_id(10).replace(['-', '_'], "x")
        ));
        let _cleanup = Cleanup::new(vec![temp.clone()], true);
        fs::write(&temp, &entry.content).map_err(|e| {
            ToolError::failed(format!(
                "cannot write the template copy {}: {e}",
                temp.display()
            ))
        })?;
        let unusable = |e: StoreError| {
            ToolError::invalid(format!(
                "template '{source}' is not a usable .adf file: {e}"
            ))
        };
        let file = AdfFile::open(&temp).map_err(unusable)?;
        let config = file.config().map_err(unusable)?;
        let mut files = Vec::new();
        for info in file.file_list("").map_err(unusable)? {
            if info.path == adf_store::skills::REGISTRY_PATH {
                continue;
            }
            if let Some(entry) = file.file_read(&info.path).map_err(unusable)? {
                files.push(entry);
            }
        }
        let identity = file
            .identity_rows()
            .map_err(unusable)?
            .into_iter()
            .filter(|row| row.encryption_algo == "plain" && !row.purpose.starts_with("crypto:"))
            .collect();
        file.close().map_err(unusable)?;
        Ok(Self {
            config,
            files,
            identity,
        })
    }
}

/// The child's config, decided before any file exists.
#[derive(Debug)]
struct Plan {
    id: String,
    config: Value,
}

impl Plan {
    fn build(request: &Request, template: Option<&Template>) -> Result<Self, ToolError> {
        let id = defaults::new_agent_id();
        let now = adf_store::time::now_iso();
        let handle = request
            .overrides
            .get("handle")
            .and_then(Value::as_str)
            .map_or_else(|| defaults::handle_from_name(&request.name), str::to_owned);
        let config_with = |name: &str, handle: &str| {
            defaults::default_config(&NewAgent {
                id: &id,
                name,
                handle,
                description: "",
                now_iso: &now,
            })
        };
        // The defaults with no name and a valid placeholder handle, so every rule judges the
        // call's name and handle as changes.
        let before = config_with("", "untitled");
        let mut config = config_with(&request.name, &handle);

        if let Some(template) = template {
            let Value::Object(mut layer) = template.config.clone() else {
                return Err(ToolError::invalid("the template's config is not an object"));
            };
            for own in ["id", "adf_version", "name", "handle"] {
                layer.remove(own);
            }
            strip_timestamps(&mut layer);
            lay(&mut config, &layer)?;
            check_locks(&template.config, &request.overrides)?;
        }
        let mut overrides = request.overrides.clone();
        strip_timestamps(&mut overrides);
        lay(&mut config, &overrides)?;

        if let Some(message) = leaf_error(&before, &config) {
            return Err(ToolError::invalid(message));
        }
        let structural = new_structural(&before, &config);
        if !structural.is_empty() {
            return Err(ToolError::invalid(structural.join("; ")));
        }
        super::config::reject_new_violations(&before, &config)?;
        Ok(Self { id, config })
    }
}

/// The child's `metadata.created_at`/`updated_at` are its own, whatever a layer says.
fn strip_timestamps(layer: &mut Map<String, Value>) {
    if let Some(Value::Object(metadata)) = layer.get_mut("metadata") {
        metadata.remove("created_at");
        metadata.remove("updated_at");
    }
}

/// Lays one layer over the config (see the module docs for the rules).
fn lay(config: &mut Value, layer: &Map<String, Value>) -> Result<(), ToolError> {
    let Value::Object(base) = config else {
        return Err(ToolError::new(
            ErrorCode::InternalError,
            "the default config is not an object",
        ));
    };
    for (key, value) in layer {
        let slot = base.entry(key.clone()).or_insert(Value::Null);
        match (key.as_str(), &mut *slot, value) {
            ("tools", Value::Array(tools), Value::Array(layer_tools)) => {
                merge_tools(tools, layer_tools)?;
            }
            ("locked_fields", Value::Array(fields), Value::Array(more)) => {
                for field in more {
                    if !fields.contains(field) {
                        fields.push(field.clone());
                    }
                }
            }
            _ => deep_merge(slot, value),
        }
    }
    Ok(())
}

/// Objects merge key by key; anything else replaces.
fn deep_merge(base: &mut Value, over: &Value) {
    match (base, over) {
        (Value::Object(base), Value::Object(over)) => {
            for (key, value) in over {
                deep_merge(base.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
        (base, over) => *base = over.clone(),
    }
}

/// Tool declarations merge by name: a known name's fields are merged into it, a new name is
/// appended. One layer naming a tool twice is refused, as a duplicate would shadow.
fn merge_tools(tools: &mut Vec<Value>, layer: &[Value]) -> Result<(), ToolError> {
    let mut seen = Vec::new();
    for declaration in layer {
        let name = declaration.get("name").and_then(Value::as_str);
        if let Some(name) = name {
            if seen.contains(&name) {
                return Err(ToolError::invalid(format!(
                    "tools: '{name}' is declared twice; a duplicate would shadow the first"
                )));
            }
            seen.push(name);
        }
        let existing = name.and_then(|name| {
            tools
                .iter_mut()
                .find(|t| t.get("name").and_then(Value::as_str) == Some(name))
        });
        match existing {
            Some(existing) => deep_merge(existing, declaration),
            None => tools.push(declaration.clone()),
        }
    }
    Ok(())
}

/// The template's locks as dot paths in name form.
fn template_locks(template: &Value) -> Vec<String> {
    let locked = |v: &Value| v.get("locked").and_then(Value::as_bool) == Some(true);
    let mut locks: Vec<String> = template
        .get("locked_fields")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect();
    for tool in template
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let (true, Some(name)) = (locked(tool), tool.get("name").and_then(Value::as_str)) {
            locks.push(format!("tools.{name}"));
        }
    }
    for (kind, trigger) in template
        .get("triggers")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        if locked(trigger) {
            locks.push(format!("triggers.{kind}"));
        }
        let targets = trigger.get("targets").and_then(Value::as_array);
        for (i, target) in targets.into_iter().flatten().enumerate() {
            if locked(target) {
                locks.push(format!("triggers.{kind}.targets.{i}"));
            }
        }
    }
    let routes = template.pointer("/serving/api").and_then(Value::as_array);
    for (i, route) in routes.into_iter().flatten().enumerate() {
        if locked(route) {
            let label = route
                .get("name")
                .and_then(Value::as_str)
                .map_or_else(|| i.to_string(), str::to_owned);
            locks.push(format!("serving.api.{label}"));
        }
    }
    locks
}

/// Every path the call's parameters write, in name form: object leaves, whole arrays, and
/// `tools.<name>.<field>` for declarations (merged by name, so that is what they touch).
fn written_paths(overrides: &Map<String, Value>) -> Vec<String> {
    fn walk(prefix: String, value: &Value, out: &mut Vec<String>) {
        match value {
            Value::Object(map) if !map.is_empty() => {
                for (key, child) in map {
                    walk(format!("{prefix}.{key}"), child, out);
                }
            }
            _ => out.push(prefix),
        }
    }
    let mut out = Vec::new();
    for (key, value) in overrides {
        match (key.as_str(), value) {
            // A union: adding locks never strips the template's.
            ("locked_fields", _) => {}
            ("tools", Value::Array(declarations)) => {
                for declaration in declarations {
                    let Some(name) = declaration.get("name").and_then(Value::as_str) else {
                        continue;
                    };
                    let prefix = format!("tools.{name}");
                    match declaration.as_object() {
                        Some(fields) if fields.len() > 1 => {
                            for (field, child) in fields.iter().filter(|(k, _)| *k != "name") {
                                walk(format!("{prefix}.{field}"), child, &mut out);
                            }
                        }
                        _ => out.push(prefix),
                    }
                }
            }
            _ => walk(key.clone(), value, &mut out),
        }
    }
    out
}

/// Refuses parameters that write at, above or below a template lock.
fn check_locks(template: &Value, overrides: &Map<String, Value>) -> Result<(), ToolError> {
    let related = |a: &str, b: &str| {
        a == b || a.starts_with(&format!("{b}.")) || b.starts_with(&format!("{a}."))
    };
    let locks = template_locks(template);
    for path in written_paths(overrides) {
        if let Some(lock) = locks.iter().find(|lock| related(&path, lock)) {
            return Err(ToolError::new(
                ErrorCode::WriteError,
                format!(
                    "'{path}' cannot be set: the template locks '{lock}', and locks carry forward to the child. Nothing was created."
                ),
            ));
        }
    }
    Ok(())
}

/// What building the child produced.
#[derive(Debug)]
struct Built {
    did: Option<String>,
    files: usize,
    identity_rows_copied: usize,
}

fn identity_error(error: IdentityError) -> ToolError {
    match error {
        IdentityError::Store(store) => store.into(),
        other => ToolError::new(
            ErrorCode::InternalError,
            format!("cannot give the new agent its identity: {other}"),
        ),
    }
}

/// Creates and fills the child file and closes it cleanly; on failure the child is removed.
fn build_child(
    path: &Path,
    plan: &Plan,
    template: Option<&Template>,
    injected: &[(String, FileEntry)],
    lineage: &str,
    keys: Option<&LocalKeys>,
) -> Result<Built, ToolError> {
    let text = |key: &str| {
        plan.config
            .get(key)
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    // `create` refuses an existing file (a race since `refuse_collision`) and removes its own
    // half-made file, so the cleanup is armed only once the file is ours.
    let child = AdfFile::create(
        path,
        &CreateOptions {
            name: text("name"),
            description: text("description"),
            handle: text("handle"),
            id: Some(plan.id.clone()),
        },
    )?;
    let mut cleanup = Cleanup::new(vec![path.to_path_buf()], false);
    // `fill` owns the file and drops it before returning, so the cleanup never removes a file
    // that is still open (closing it afterwards could recreate a `-wal` beside nothing).
    let built = fill(child, plan, template, injected, lineage, keys)?;
    cleanup.disarm();
    Ok(built)
}

/// Everything after `create`, in one transaction of the child, then a clean close.
fn fill(
    mut child: AdfFile,
    plan: &Plan,
    template: Option<&Template>,
    injected: &[(String, FileEntry)],
    lineage: &str,
    keys: Option<&LocalKeys>,
) -> Result<Built, ToolError> {
    let built = child.atomically(|child| -> Result<Built, ToolError> {
        let open = keys
            .map(|keys| identity::provision_new(child, keys))
            .transpose()
            .map_err(identity_error)?;
        child.config_replace(adf_store::Caller::Owner, plan.config.clone())?;
        let mut identity_rows_copied = 0;
        if let Some(template) = template {
            for entry in &template.files {
                copy_template_file(child, entry)?;
            }
            for row in &template.identity {
                copy_identity_row(child, open.as_ref(), row)?;
                identity_rows_copied += 1;
            }
        }
        for (to, entry) in injected {
            inject_file(child, to, entry)?;
        }
        child.meta_set_runtime("adf_parent_did", lineage)?;
        Ok(Built {
            did: child
                .meta_get("adf_did")?
                .map(|e| e.value)
                .filter(|did| !did.is_empty()),
            files: child.file_list("")?.len(),
            identity_rows_copied,
        })
    })?;
    child.close()?;
    Ok(built)
}

/// A template file with its protection; never its `authorized` flag (module docs).
fn copy_template_file(child: &mut AdfFile, entry: &FileEntry) -> Result<(), ToolError> {
    let protection = entry.info.protection;
    let outcome = child.file_write(
        adf_store::Caller::Owner,
        &entry.info.path,
        &entry.content,
        &FileWrite {
            mime_type: entry.info.mime_type.clone(),
            protection_if_new: Some(protection),
        },
    )?;
    // A core file the child already had keeps its default protection unless set here.
    if !outcome.created {
        child.file_set_protection(adf_store::Caller::Owner, &entry.info.path, protection)?;
    }
    Ok(())
}

/// A plaintext credential from the template: sealed into the child's credentials envelope
/// when the child has one, else stored as it was (first-open provisioning seals it).
fn copy_identity_row(
    child: &mut AdfFile,
    open: Option<&OpenIdentity>,
    row: &IdentityRow,
) -> Result<(), ToolError> {
    match open {
        Some(open) => {
            identity::set_credential(child, open, &row.purpose, &row.value, row.code_access)
                .map_err(identity_error)
        }
        None => Ok(child.identity_put(std::slice::from_ref(row))?),
    }
}

/// A file from the parent: overwrites keep their protection, `read_only` ones refuse. It is
/// the agent's write into its child, so it goes to the store as one ([`adf_store::Caller::Agent`]),
/// whose protection module decides what the child's protections allow (whoever called
/// `sys_create_adf`: an injection is never an override).
fn inject_file(child: &mut AdfFile, to: &str, entry: &FileEntry) -> Result<(), ToolError> {
    let written = child.file_write(
        adf_store::Caller::Agent,
        to,
        &entry.content,
        &FileWrite {
            mime_type: entry.info.mime_type.clone(),
            protection_if_new: None,
        },
    );
    match written {
        Ok(_) => Ok(()),
        Err(StoreError::Protected {
            level, why: None, ..
        }) => Err(ToolError::new(
            ErrorCode::WriteError,
            format!(
                "files: '{to}' is {level} in the new agent and cannot be overwritten. Nothing was created."
            ),
        )),
        Err(other) => Err(other.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_rules_tools_by_name_objects_deep_arrays_replace_locks_union() {
        let mut config = json!({
            "model": { "provider": "openai", "temperature": 0.7 },
            "tools": [{ "name": "fs_read", "enabled": true, "visible": true }],
            "serving": { "api": [{ "name": "a" }] },
            "locked_fields": ["instructions"]
        });
        let layer = json!({
            "model": { "temperature": 0.5 },
            "tools": [{ "name": "fs_read", "enabled": false }, { "name": "mcp_x", "enabled": true }],
            "serving": { "api": [{ "name": "b" }] },
            "locked_fields": ["model.provider", "instructions"]
        });
        assert!(lay(&mut config, layer.as_object().unwrap_or(&Map::new())).is_ok());
        assert_eq!(
            config["model"],
            json!({ "provider": "openai", "temperature": 0.5 })
        );
        assert_eq!(
            config["tools"],
            json!([{ "name": "fs_read", "enabled": false, "visible": true }, { "name": "mcp_x", "enabled": true }])
        );
        assert_eq!(config["serving"]["api"], json!([{ "name": "b" }]));
        assert_eq!(
            config["locked_fields"],
            json!(["instructions", "model.provider"])
        );
    }

    #[test]
    fn locks_match_at_above_and_below_the_written_path() {
        let template = json!({
            "locked_fields": ["model.provider"],
            "tools": [{ "name": "fs_write", "locked": true }],
            "triggers": { "on_inbox": { "targets": [{ "scope": "agent", "locked": true }] } },
            "serving": { "api": [{ "name": "hook", "locked": true }] }
        });
        let refused = |overrides: Value| {
            check_locks(&template, overrides.as_object().unwrap_or(&Map::new())).is_err()
        };
        assert!(refused(json!({ "model": { "provider": "x" } })));
        assert!(refused(json!({ "model": "replaced" })));
        assert!(refused(
            json!({ "tools": [{ "name": "fs_write", "enabled": false }] })
        ));
        assert!(refused(
            json!({ "triggers": { "on_inbox": { "targets": [] } } })
        ));
        assert!(refused(json!({ "serving": { "api": [] } })));
        assert!(!refused(json!({ "model": { "temperature": 0.5 } })));
        assert!(!refused(
            json!({ "tools": [{ "name": "fs_read", "enabled": false }] })
        ));
        assert!(!refused(
            json!({ "triggers": { "on_inbox": { "enabled": false } } })
        ));
        assert!(!refused(json!({ "locked_fields": ["description"] })));
    }
}
