//! `sys_create_adf` on real files in temp dirs: both adf-object guide examples (the first as an
//! authorized lambda, the second with a template `.adf` stored in the parent's files), the
//! template rules (fresh identity, copied plaintext credentials, files with protection, locks),
//! file injection, config validation, lineage, placement and collisions, and the access rules
//! of a restricted tool. Every refusal is checked to leave no file behind and the parent as it
//! was (TOL-44..50, MET-21, DEF-11, DEF-21, POR-01, POR-07, POR-08, STL-25).
use crate::common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use adf_runtime::code::{self, Authorization, CodeEnv, LambdaRef, RunOptions, Sandbox};
use adf_runtime::home::RuntimeHome;
use adf_runtime::identity::{self, LocalKeys};
use adf_runtime::tools::approval::{ApproveAll, DenyAll};
use adf_runtime::tools::builtin::create_adf::CreateAdf;
use adf_runtime::tools::builtin::loops::effective_loop_tools;
use adf_runtime::tools::{Approver, CallOutcome, ErrorCode, ToolCaller, ToolError, ToolRegistry};
use adf_store::{AdfFile, CreateOptions, FileProtection, FileWrite, IdentityRow};
use common::{authorized, code, digest, enable, model, owner_set};
use serde_json::{Value, json};

const TOOL: &str = "sys_create_adf";

/// A parent agent in its own directory, with a runtime home (owner + runtime keys) beside it.
struct Env {
    dir: tempfile::TempDir,
    home: RuntimeHome,
    parent: AdfFile,
}

impl Env {
    /// The parent with `sys_create_adf` enabled by its owner (it is disabled by default).
    fn new() -> Self {
        let mut env = Self::bare();
        enable(&mut env.parent, TOOL);
        env
    }

    /// The parent exactly as `adf new` leaves it, without an identity.
    fn bare() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let home = RuntimeHome::at(dir.path().join(".home"));
        home.init_owner(false).unwrap();
        let parent = AdfFile::create(
            dir.path().join("parent.adf"),
            &CreateOptions {
                name: Some("parent".into()),
                ..CreateOptions::default()
            },
        )
        .unwrap();
        Self { dir, home, parent }
    }

    fn keys(&self) -> LocalKeys {
        LocalKeys::from_home(&self.home).unwrap()
    }

    fn registry(&self) -> ToolRegistry {
        let mut registry = ToolRegistry::with_builtins();
        registry.register(Arc::new(CreateAdf::with_home(self.home.clone())));
        registry
    }

    fn call_with(
        &mut self,
        caller: &ToolCaller,
        args: Value,
        approver: &dyn Approver,
    ) -> Result<Value, ToolError> {
        self.registry()
            .call(&mut self.parent, caller, TOOL, args, approver)
            .map(CallOutcome::into_value)
    }

    /// Authorized code: no approval step, so the parent gets no task row.
    fn create(&mut self, args: Value) -> Result<Value, ToolError> {
        self.call_with(&authorized(), args, &DenyAll)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn put(&mut self, path: &str, content: &[u8]) {
        self.parent
            .file_write(
                adf_store::Caller::Owner,
                path,
                content,
                &FileWrite::default(),
            )
            .unwrap();
    }

    /// Calls as authorized code, expects `code`, and checks that nothing was created and the
    /// parent is unchanged.
    fn refused(&mut self, args: Value, code: ErrorCode) -> ToolError {
        let before = digest(&self.parent);
        let listing = entries(self.dir.path());
        let error = self
            .create(args.clone())
            .expect_err(&format!("{args} should be refused"));
        assert_eq!(error.code, code, "{args}: {error}");
        assert_eq!(
            entries(self.dir.path()),
            listing,
            "{args} left files behind"
        );
        assert_eq!(digest(&self.parent), before, "{args} changed the parent");
        error
    }
}

/// Every entry of a directory tree, sorted (temp copies and sidecars included).
fn entries(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(next) = stack.pop() {
        for entry in std::fs::read_dir(&next).unwrap() {
            let path = entry.unwrap().path();
            if path.file_name().is_some_and(|n| n == ".home") {
                continue;
            }
            if path.is_dir() {
                stack.push(path.clone());
            }
            out.push(path.strip_prefix(dir).unwrap().display().to_string());
        }
    }
    out.sort();
    out
}

fn meta(file: &AdfFile, key: &str) -> String {
    file.meta_get(key)
        .unwrap()
        .map(|e| e.value)
        .unwrap_or_default()
}

fn put_file(file: &mut AdfFile, path: &str, content: &str, protection: FileProtection) {
    file.file_write(
        adf_store::Caller::Owner,
        path,
        content.as_bytes(),
        &FileWrite {
            protection_if_new: Some(protection),
            ..FileWrite::default()
        },
    )
    .unwrap();
    file.file_set_protection(adf_store::Caller::Owner, path, protection)
        .unwrap();
}

/// Opens a created child as `adf check` does and asserts it is clean, identity included.
fn assert_checks_clean(path: &Path, keys: &LocalKeys) {
    let file = AdfFile::inspect(path).unwrap();
    let report = file.check().unwrap();
    assert!(report.is_ok(), "check: {:?}", report.findings);
    let identity = identity::verify(&file, Some(keys)).unwrap();
    assert!(
        identity
            .iter()
            .all(|f| f.severity != adf_store::check::Severity::Error),
        "identity check: {identity:?}"
    );
}

/// A template `.adf` with an identity, a plaintext and a sealed credential, files of every
/// protection, a transcript row and a template meta key; returns its bytes and its DID.
fn template(env: &Env, configure: impl FnOnce(&mut AdfFile)) -> (Vec<u8>, String) {
    let path = env.path("template-src.adf");
    let keys = env.keys();
    let mut file = AdfFile::create(
        &path,
        &CreateOptions {
            name: Some("Worker Template".into()),
            ..CreateOptions::default()
        },
    )
    .unwrap();
    let open = identity::provision_new(&mut file, &keys).unwrap();
    identity::set_credential(
        &mut file,
        &open,
        "mcp:github:token",
        b"sealed-secret",
        false,
    )
    .unwrap();
    file.identity_put(&[IdentityRow {
        purpose: "provider:openai:apiKey".into(),
        value: b"sk-template-plain".to_vec(),
        encryption_algo: "plain".into(),
        salt: None,
        kdf_params: None,
        code_access: true,
    }])
    .unwrap();
    owner_set(
        &mut file,
        "model",
        json!({ "provider": "openai", "model_id": "gpt-4o", "temperature": 0.9, "max_tokens": 4096 }),
    );
    owner_set(&mut file, "description", json!("A worker template"));
    owner_set(&mut file, "metadata.team", json!("blue"));
    owner_set(&mut file, "tools.fs_write.enabled", json!(false));
    put_file(
        &mut file,
        "README.md",
        "# Worker\n\nFrom the template.\n",
        FileProtection::NoDelete,
    );
    put_file(
        &mut file,
        "lib/worker.ts",
        "export function main() { return 1 }\n",
        FileProtection::ReadOnly,
    );
    file.file_set_authorized(adf_store::Caller::Owner, "lib/worker.ts", true)
        .unwrap();
    put_file(
        &mut file,
        "prompts.md",
        "template prompts",
        FileProtection::NoDelete,
    );
    put_file(
        &mut file,
        "policy.md",
        "the rules",
        FileProtection::ReadOnly,
    );
    put_file(&mut file, "notes.md", "notes", FileProtection::None);
    file.loop_append(&adf_store::NewLoopRow {
        r#loop: "main",
        role: "user",
        content: &json!([{ "type": "text", "text": "hello template" }]),
        model: None,
        tokens: None,
    })
    .unwrap();
    file.meta_set(
        adf_store::Caller::Owner,
        "adf_template_description",
        "a picker description",
        None,
    )
    .unwrap();
    configure(&mut file);
    let did = meta(&file, "adf_did");
    file.close().unwrap();
    let bytes = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    (bytes, did)
}

fn config(path: &Path) -> Value {
    AdfFile::inspect(path).unwrap().config().unwrap()
}

// ---------- access ----------

#[test]
fn def_21_tol_44_disabled_by_default_restricted_needs_approval_and_unauthorized_code_is_refused() {
    let mut env = Env::bare();
    let args = json!({ "name": "worker" });
    let error = env
        .call_with(&model(), args.clone(), &ApproveAll)
        .unwrap_err();
    assert_eq!(
        error.code,
        ErrorCode::Disabled,
        "DEF-21: disabled by default"
    );

    enable(&mut env.parent, TOOL);
    let error = env.call_with(&model(), args.clone(), &DenyAll).unwrap_err();
    assert_eq!(
        error.code,
        ErrorCode::Denied,
        "TOL-44: restricted → approval"
    );
    assert!(!env.path("worker.adf").exists(), "denied creates nothing");

    let error = env
        .call_with(&code(), args.clone(), &ApproveAll)
        .unwrap_err();
    assert_eq!(error.code, ErrorCode::RequiresAuthorizedCode);
    assert!(!env.path("worker.adf").exists());

    let result = env.call_with(&model(), args, &ApproveAll).unwrap();
    assert_eq!(result["name"], "worker");
    assert!(env.path("worker.adf").exists(), "approved creates");
    let tasks = env.parent.tasks(None).unwrap();
    let approvals: Vec<_> = tasks.iter().filter(|t| t.tool == TOOL).collect();
    assert_eq!(approvals.len(), 2, "one denied and one approved request");
    assert!(approvals.iter().any(|t| t.status == "completed"));
}

#[tokio::test]
async fn tol_44_sys_code_cannot_create_because_inline_code_is_never_authorized() {
    let mut env = Env::new();
    let registry = Arc::new(env.registry());
    let sandbox = Sandbox::new(Default::default()).await.unwrap();
    let code_env = CodeEnv::new(sandbox, registry);
    let run = code::run_inline(
        &mut env.parent,
        &code_env,
        "return await adf.sys_create_adf({ name: 'worker-1' })",
        false,
        &ApproveAll,
        &RunOptions::default(),
    )
    .await;
    let error = run.result.unwrap_err();
    assert_eq!(error.code, ErrorCode::RequiresAuthorizedCode, "{error}");
    assert!(!env.path("worker-1.adf").exists());
}

#[test]
fn stl_25_inner_loops_never_hold_sys_create_adf() {
    let mut env = Env::new();
    owner_set(
        &mut env.parent,
        "tools.sys_create_adf.restricted",
        json!(false),
    );
    let config = env.parent.config().unwrap();
    let tools = effective_loop_tools(
        &config,
        &json!({ "name": "helper", "tools": [TOOL, "fs_read"] }),
    );
    assert!(!tools.contains(TOOL), "{tools:?}");
    assert!(tools.contains("fs_read"));
}

// ---------- the guide's examples ----------

#[tokio::test]
async fn tol_50_guide_example_1_basic_creation_from_an_authorized_lambda() {
    let mut env = Env::new();
    env.put(
        "lib/spawn.ts",
        b"export async function main() {\n  return await adf.sys_create_adf({ name: 'worker-1', instructions: 'You are a worker agent.' })\n}\n",
    );
    env.parent
        .file_set_authorized(adf_store::Caller::Owner, "lib/spawn.ts", true)
        .unwrap();
    let sandbox = Sandbox::new(Default::default()).await.unwrap();
    let code_env = CodeEnv::new(sandbox, Arc::new(env.registry()));
    let run = code::run_lambda(
        &mut env.parent,
        &code_env,
        &LambdaRef::parse("lib/spawn.ts").unwrap(),
        json!({}),
        Authorization::SourceFile,
        &DenyAll,
        &RunOptions::default(),
    )
    .await;
    let result = run.result.unwrap_or_else(|e| panic!("{e}; {:?}", run.logs));

    let path = std::fs::canonicalize(env.dir.path())
        .unwrap()
        .join("worker-1.adf");
    assert_eq!(
        result["path"],
        path.display().to_string(),
        "TOL-50: caller's directory"
    );
    assert_eq!(result["name"], "worker-1");
    assert_eq!(result["autostart"], false);
    assert_eq!(result["autostarted"], false);
    let child_config = config(&path);
    assert_eq!(child_config["name"], "worker-1");
    assert_eq!(child_config["handle"], "worker-1");
    assert_eq!(child_config["instructions"], "You are a worker agent.");
    assert_eq!(result["id"], child_config["id"]);
    assert_ne!(child_config["id"], env.parent.config().unwrap()["id"]);
    let child = AdfFile::inspect(&path).unwrap();
    assert!(meta(&child, "adf_did").starts_with("did:key:"));
    assert_eq!(result["did"], meta(&child, "adf_did"));
    assert_eq!(meta(&child, "adf_name"), "worker-1");
    assert_eq!(
        child
            .meta_get("adf_parent_did")
            .unwrap()
            .unwrap()
            .protection,
        "readonly"
    );
    drop(child);
    assert_checks_clean(&path, &env.keys());
}

#[test]
fn tol_45_tol_46_tol_48_def_11_por_07_por_08_guide_example_2_template_with_file_injection() {
    let mut env = Env::new();
    let (bytes, template_did) = template(&env, |_| {});
    env.put("templates/worker.adf", &bytes);
    env.put("config/prompts.md", b"parent prompts");
    env.put("config/extra.md", b"extra");

    // The adf-object guide's second example, from the model with the owner's approval.
    let result = env
        .call_with(
            &model(),
            json!({
                "name": "worker-2",
                "template": "templates/worker.adf",
                "files": [
                    { "parent_path": "config/prompts.md", "child_path": "prompts.md" },
                    { "parent_path": "config/extra.md", "child_path": "docs/extra.md" }
                ],
                "model": { "temperature": 0.5 },
                "metadata": { "role": "worker" }
            }),
            &ApproveAll,
        )
        .unwrap();
    let path = env.path("worker-2.adf");
    assert!(path.exists(), "{result}");

    // TOL-45: AGENT_DEFAULTS → template → params.
    let child_config = config(&path);
    assert_eq!(
        child_config["model"]["temperature"], 0.5,
        "param over template"
    );
    assert_eq!(child_config["model"]["provider"], "openai", "template kept");
    assert_eq!(child_config["model"]["model_id"], "gpt-4o");
    assert_eq!(child_config["description"], "A worker template");
    assert_eq!(child_config["name"], "worker-2");
    assert_eq!(child_config["handle"], "worker-2");
    assert_eq!(child_config["metadata"]["team"], "blue", "metadata merged");
    assert_eq!(child_config["metadata"]["role"], "worker");
    assert!(child_config["metadata"]["created_at"].is_string());
    let fs_write = child_config["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "fs_write")
        .unwrap();
    assert_eq!(fs_write["enabled"], false, "template tool flags kept");
    assert_eq!(
        child_config["triggers"]["on_inbox"],
        adf_store::defaults::default_triggers()["on_inbox"],
        "defaults under the template"
    );

    // TOL-46: fresh identity; plaintext non-signing rows copied, sealed ones skipped.
    let keys = env.keys();
    let mut child = AdfFile::open(&path).unwrap();
    let did = meta(&child, "adf_did");
    assert!(did.starts_with("did:key:"));
    assert_ne!(did, template_did, "TOL-46: fresh DID");
    assert_eq!(result["did"], did);
    let open = identity::open_identity(&mut child, &keys).unwrap();
    let copied = identity::read_credential(&child, &open, "provider:openai:apiKey")
        .unwrap()
        .expect("the plaintext credential is copied");
    assert_eq!(copied.as_slice(), b"sk-template-plain");
    assert!(
        identity::read_credential(&child, &open, "mcp:github:token")
            .unwrap()
            .is_none(),
        "sealed rows are skipped"
    );
    let row = crate::common::identity_row(&child, "provider:openai:apiKey").unwrap();
    assert_ne!(
        row.encryption_algo, "plain",
        "sealed into the child's envelope"
    );
    assert!(row.code_access, "code_access carried");
    assert_eq!(result["identity_rows_copied"], 1);

    // Template files with their protection, never authorized; injection over them.
    let file = |path: &str| child.file_read(path).unwrap().unwrap();
    assert_eq!(
        file("README.md").content,
        b"# Worker\n\nFrom the template.\n",
        "DEF-11"
    );
    assert_eq!(file("lib/worker.ts").info.protection, "read_only");
    assert!(
        !file("lib/worker.ts").info.authorized,
        "trust is not copied"
    );
    assert_eq!(file("policy.md").info.protection, "read_only");
    assert_eq!(file("notes.md").info.protection, "none");
    assert_eq!(
        file("prompts.md").content,
        b"parent prompts",
        "TOL-48: overwritten"
    );
    assert_eq!(
        file("prompts.md").info.protection,
        "no_delete",
        "TOL-48: protection kept"
    );
    assert_eq!(
        file("docs/extra.md").info.protection,
        "none",
        "TOL-48: new file"
    );

    // §16: the template's transcript and meta stay behind.
    assert!(child.loop_rows("main").unwrap().is_empty(), "POR-07");
    assert!(
        child
            .meta_get("adf_template_description")
            .unwrap()
            .is_none(),
        "POR-08"
    );
    drop(open);
    child.close().unwrap();
    assert_checks_clean(&path, &keys);

    // POR-01: the parent holds nothing of the child (its files are as they were).
    let parent_files: Vec<String> = env
        .parent
        .file_list("")
        .unwrap()
        .into_iter()
        .map(|f| f.path)
        .collect();
    assert!(!parent_files.iter().any(|p| p.contains("worker-2")));
}

#[test]
fn tol_46_template_from_an_older_schema_is_migrated_and_its_plain_signing_key_never_copied() {
    let mut env = Env::new();
    let fixture = common::fixture("minimal-headless.adf");
    let bytes = std::fs::read(fixture).unwrap();
    env.put("templates/old.adf", &bytes);
    let result = env
        .create(json!({ "name": "from-old", "template": "templates/old.adf" }))
        .unwrap();
    let path = env.path("from-old.adf");
    let child = AdfFile::inspect(&path).unwrap();
    let did = meta(&child, "adf_did");
    assert_ne!(
        did,
        "did:key:z6MktBqvVtR8pFeAnweZr4BSH3Gs66CZsvH6LpdPgD2Kai7s"
    );
    assert_eq!(result["identity_rows_copied"], 0, "{result}");
    let rows = child.identity_rows().unwrap();
    let private = rows
        .iter()
        .find(|r| r.purpose == "crypto:signing:private_key")
        .unwrap();
    assert_ne!(
        private.encryption_algo, "plain",
        "the child's own sealed key"
    );
    drop(child);
    assert_checks_clean(&path, &env.keys());
    assert!(
        !entries(env.dir.path())
            .iter()
            .any(|e| e.contains("template")),
        "the temporary template copy is removed"
    );
}

// ---------- refusals leave nothing behind ----------

#[test]
fn tol_48_injection_into_a_read_only_file_is_refused_and_creates_nothing() {
    let mut env = Env::new();
    let (bytes, _) = template(&env, |_| {});
    env.put("templates/worker.adf", &bytes);
    env.put("mine.md", b"mine");
    let error = env.refused(
        json!({
            "name": "worker",
            "template": "templates/worker.adf",
            "files": [{ "parent_path": "mine.md", "child_path": "policy.md" }]
        }),
        ErrorCode::WriteError,
    );
    assert!(error.message.contains("read_only"), "{error}");
    assert!(error.protection.is_none(), "no one-time override for this");

    let error = env.refused(
        json!({ "name": "worker", "files": [{ "parent_path": "missing.md", "child_path": "x.md" }] }),
        ErrorCode::NotFound,
    );
    assert!(error.message.contains("missing.md"), "{error}");
    env.refused(
        json!({ "name": "worker", "files": [{ "parent_path": "mine.md", "child_path": "../x.md" }] }),
        ErrorCode::InvalidInput,
    );
    env.refused(
        json!({ "name": "worker", "template": "missing.adf" }),
        ErrorCode::NotFound,
    );
    env.put("templates/garbage.adf", b"not a database at all");
    let error = env.refused(
        json!({ "name": "worker", "template": "templates/garbage.adf" }),
        ErrorCode::InvalidInput,
    );
    assert!(error.message.contains("not a usable .adf"), "{error}");
}

#[test]
fn tol_47_template_locks_refuse_overrides_and_carry_forward() {
    let mut env = Env::new();
    let (bytes, _) = template(&env, |file| {
        owner_set(
            file,
            "locked_fields",
            json!(["instructions", "model.provider"]),
        );
        owner_set(file, "tools.fs_read.locked", json!(true));
        owner_set(
            file,
            "triggers.on_inbox.targets",
            json!([{ "scope": "agent", "locked": true }]),
        );
        owner_set(
            file,
            "serving.api",
            json!([{ "name": "hook", "method": "POST", "path": "/hook", "lambda": "lib/worker.ts:main", "locked": true }]),
        );
    });
    env.put("templates/locked.adf", &bytes);
    let with = |extra: Value| {
        let mut args = json!({ "name": "locked-child", "template": "templates/locked.adf" });
        for (k, v) in extra.as_object().unwrap() {
            args[k] = v.clone();
        }
        args
    };
    for overrides in [
        json!({ "instructions": "something else" }),
        json!({ "model": { "provider": "anthropic" } }),
        json!({ "tools": [{ "name": "fs_read", "enabled": false }] }),
        json!({ "triggers": { "on_inbox": { "targets": [] } } }),
        json!({ "serving": { "api": [] } }),
    ] {
        let error = env.refused(with(overrides.clone()), ErrorCode::WriteError);
        assert!(error.message.contains("locks"), "{overrides}: {error}");
    }

    // What is not locked may change; locks carry forward and can only be added to.
    env.create(with(json!({
        "model": { "temperature": 0.2 },
        "tools": [{ "name": "fs_write", "enabled": true }],
        "triggers": { "on_inbox": { "enabled": false } },
        "locked_fields": ["description"]
    })))
    .unwrap();
    let child = config(&env.path("locked-child.adf"));
    assert_eq!(
        child["locked_fields"],
        json!(["instructions", "model.provider", "description"])
    );
    let fs_read = child["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "fs_read")
        .unwrap();
    assert_eq!(fs_read["locked"], true);
    assert_eq!(child["triggers"]["on_inbox"]["targets"][0]["locked"], true);
    assert_eq!(child["triggers"]["on_inbox"]["enabled"], false);
    assert_eq!(child["serving"]["api"][0]["locked"], true);
    assert_eq!(child["model"]["temperature"], 0.2);
}

#[test]
fn invalid_config_overrides_are_refused_before_any_file_exists() {
    let mut env = Env::new();
    for args in [
        json!({ "name": "w", "model": { "temperature": 5 } }),
        json!({ "name": "w", "state": "suspended" }),
        json!({ "name": "w", "start_in_state": "off" }),
        json!({ "name": "w", "handle": "Not A Handle" }),
        json!({ "name": "w", "triggers": { "on_bogus": { "enabled": true } } }),
        json!({ "name": "w", "logging": { "default_level": "loud" } }),
        json!({ "name": "w", "loops": [{ "name": "helper", "tools": [TOOL] }] }),
        json!({ "name": "w", "tools": [{ "name": "fs_read" }, { "name": "fs_read" }] }),
        json!({ "name": "w", "bogus_section": true }),
        json!({ "name": "w", "model": "not an object" }),
        json!({ "name": "a/b" }),
        json!({ "name": "" }),
        json!({ "name": "w", "location": "../elsewhere" }),
        json!({ "name": "w", "location": "/tmp" }),
        json!({ "name": "w", "location": "no-such-dir" }),
    ] {
        env.refused(args, ErrorCode::InvalidInput);
    }
}

// ---------- lineage, placement, autostart ----------

#[test]
fn met_21_lineage_is_the_parent_did_or_its_config_id() {
    let mut env = Env::new();
    let parent_id = env.parent.config().unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let result = env.create(json!({ "name": "no-did" })).unwrap();
    let child = AdfFile::inspect(env.path("no-did.adf")).unwrap();
    assert_eq!(
        meta(&child, "adf_parent_did"),
        parent_id,
        "parent without a DID"
    );
    assert_eq!(result["parent_did"], parent_id.as_str());
    drop(child);

    let keys = env.keys();
    identity::provision_new(&mut env.parent, &keys).unwrap();
    let parent_did = meta(&env.parent, "adf_did");
    assert!(parent_did.starts_with("did:key:"));
    env.create(json!({ "name": "with-did" })).unwrap();
    let child = AdfFile::inspect(env.path("with-did.adf")).unwrap();
    assert_eq!(meta(&child, "adf_parent_did"), parent_did, "MET-21");
    assert_ne!(meta(&child, "adf_did"), parent_did);
}

#[test]
fn without_an_owner_the_child_has_no_identity_until_an_owner_opens_it() {
    let mut env = Env::new();
    let empty_home = RuntimeHome::at(env.path(".home-empty"));
    let mut registry = ToolRegistry::with_builtins();
    registry.register(Arc::new(CreateAdf::with_home(empty_home.clone())));
    let result = registry
        .call(
            &mut env.parent,
            &authorized(),
            TOOL,
            json!({ "name": "orphan" }),
            &DenyAll,
        )
        .unwrap()
        .into_value();
    assert!(result.get("did").is_none(), "{result}");
    assert!(
        !empty_home.dir().exists(),
        "no owner is created as a side effect"
    );
    let mut child = AdfFile::open(env.path("orphan.adf")).unwrap();
    assert_eq!(meta(&child, "adf_did"), "");
    let open = identity::open_identity(&mut child, &env.keys()).unwrap();
    assert!(
        open.provisioned.is_some(),
        "provisioned on first open by an owner"
    );
}

#[test]
fn tol_50_location_is_a_directory_below_the_parent_and_collisions_are_refused() {
    let mut env = Env::new();
    std::fs::create_dir_all(env.path("team/a")).unwrap();
    let result = env
        .create(json!({ "name": "Deep Worker", "location": "team/a" }))
        .unwrap();
    let expected = std::fs::canonicalize(env.path("team/a"))
        .unwrap()
        .join("deep-worker.adf");
    assert_eq!(result["path"], expected.display().to_string());
    assert!(expected.exists());

    // The same name again, and a name whose file is the parent itself.
    let before = std::fs::read(&expected).unwrap();
    let error = env.refused(
        json!({ "name": "Deep Worker", "location": "team/a" }),
        ErrorCode::InvalidInput,
    );
    assert!(error.message.contains("already exists"), "{error}");
    assert_eq!(
        std::fs::read(&expected).unwrap(),
        before,
        "first child untouched"
    );
    env.refused(json!({ "name": "parent" }), ErrorCode::InvalidInput);

    // A leftover sidecar counts as a collision too.
    std::fs::write(env.path("ghost.adf-wal"), b"stale").unwrap();
    env.refused(json!({ "name": "ghost" }), ErrorCode::InvalidInput);

    // A location that is a file, and a symlink leading out of the parent's directory.
    std::fs::write(env.path("team/file.txt"), b"x").unwrap();
    env.refused(
        json!({ "name": "w", "location": "team/file.txt" }),
        ErrorCode::InvalidInput,
    );
    #[cfg(unix)]
    {
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), env.path("out")).unwrap();
        env.refused(
            json!({ "name": "w", "location": "out" }),
            ErrorCode::InvalidInput,
        );
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    }
}

#[test]
fn tol_49_without_a_hosting_runtime_an_autostart_child_is_stored_and_reported_as_not_started() {
    let mut env = Env::new();
    let result = env
        .create(json!({ "name": "auto", "autostart": true, "autonomous": true }))
        .unwrap();
    assert_eq!(result["autostart"], true);
    assert_eq!(result["autostarted"], false);
    let note = result["autostart_note"].as_str().unwrap();
    assert!(note.contains("cannot start another agent"), "{note}");
    assert!(note.contains("autostart"), "{note}");
    let child = config(&env.path("auto.adf"));
    assert_eq!(child["autostart"], true);
    assert_eq!(child["autonomous"], true);
}

/// A runtime hosting agents that records what it was asked to start, or refuses with `refusal`.
#[derive(Debug, Default)]
struct Host {
    started: std::sync::Mutex<Vec<PathBuf>>,
    refusal: Option<String>,
}

impl adf_runtime::messaging::Mesh for Host {
    fn reachable_agents(&self, _: &Path) -> Vec<adf_runtime::messaging::LocalAgent> {
        Vec::new()
    }
    fn find(&self, _: &str, _: Option<&str>) -> Option<adf_runtime::messaging::LocalAgent> {
        None
    }
    fn inbox_url(&self, _: &str) -> Option<String> {
        None
    }
    fn deliver(
        &self,
        _: &adf_runtime::messaging::LocalAgent,
        _: &Path,
        _: Value,
    ) -> futures::future::BoxFuture<'static, adf_runtime::messaging::Delivery> {
        Box::pin(async { adf_runtime::messaging::Delivery::failed(None, "not in this test") })
    }
    fn start_agent(&self, path: &Path) -> Result<(), String> {
        if let Some(why) = &self.refusal {
            return Err(why.clone());
        }
        self.started.lock().unwrap().push(path.to_path_buf());
        Ok(())
    }
}

#[test]
fn tol_49_a_hosting_runtime_starts_an_autostart_child_at_once() {
    let mut env = Env::new();
    let host = Arc::new(Host::default());
    let mut registry = ToolRegistry::with_builtins();
    registry.register(Arc::new(CreateAdf::hosted(
        host.clone(),
        Some(env.home.clone()),
    )));
    let create = |env: &mut Env, args: Value| {
        registry
            .call(&mut env.parent, &authorized(), TOOL, args, &DenyAll)
            .map(CallOutcome::into_value)
            .unwrap()
    };
    let started = create(&mut env, json!({ "name": "eager", "autostart": true }));
    assert_eq!(started["autostarted"], true, "{started}");
    assert!(started.get("autostart_note").is_none(), "{started}");
    assert_eq!(*host.started.lock().unwrap(), [env.path("eager.adf")]);
    // Without autostart nothing is started.
    let idle = create(&mut env, json!({ "name": "idle" }));
    assert_eq!(idle["autostarted"], false);
    assert_eq!(host.started.lock().unwrap().len(), 1);

    // A host that cannot start it: the child stays created, the note says why.
    let refusing = Arc::new(Host {
        refusal: Some("the daemon is shutting down".into()),
        ..Host::default()
    });
    let mut registry = ToolRegistry::with_builtins();
    registry.register(Arc::new(CreateAdf::hosted(
        refusing,
        Some(env.home.clone()),
    )));
    let result = registry
        .call(
            &mut env.parent,
            &authorized(),
            TOOL,
            json!({ "name": "late", "autostart": true }),
            &DenyAll,
        )
        .map(CallOutcome::into_value)
        .unwrap();
    assert_eq!(result["autostarted"], false);
    let note = result["autostart_note"].as_str().unwrap();
    assert!(note.contains("the daemon is shutting down"), "{note}");
    assert!(env.path("late.adf").exists());
}

#[test]
fn por_01_a_successful_creation_writes_nothing_to_the_parent() {
    let mut env = Env::new();
    let before = digest(&env.parent);
    env.create(json!({ "name": "quiet", "description": "d", "icon": "🦊" }))
        .unwrap();
    assert_eq!(digest(&env.parent), before);
    let child = config(&env.path("quiet.adf"));
    assert_eq!(child["icon"], "🦊");
    assert_eq!(child["description"], "d");
}
