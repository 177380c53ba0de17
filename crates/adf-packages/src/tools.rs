//! `npm_install` and `npm_uninstall` (tools guide "Package Management Tools"), declared only
//! where a template or the owner declares them (§14.3: not by default). Like `mcp_install`
//! they run inside the call's transaction: the install runs on a scoped thread with a runtime
//! of its own while the caller's thread holds the file and waits, then the new
//! `code_execution.packages` is written in the same transaction (a failed install changes
//! nothing).

use std::sync::Arc;

use adf_runtime::tools::{ErrorCode, Tool, ToolContext, ToolError};
use serde_json::{Value, json};

use crate::{Limits, PackageStore, install::Installer};

/// The two tools over `store`.
pub fn tools(store: PackageStore) -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(NpmInstall {
            store: store.clone(),
            limits: Limits::default(),
        }),
        Arc::new(NpmUninstall),
    ]
}

/// `npm_install {name, version?}`.
#[derive(Debug)]
pub struct NpmInstall {
    store: PackageStore,
    limits: Limits,
}

/// `npm_uninstall {name}`.
#[derive(Debug)]
pub struct NpmUninstall;

fn packages_of(config: &Value) -> Value {
    config
        .pointer("/code_execution/packages")
        .cloned()
        .unwrap_or(Value::Array(Vec::new()))
}

/// Writes `packages` to `code_execution.packages` of the file's config.
fn write_packages(cx: &mut ToolContext<'_>, packages: Value) -> Result<(), ToolError> {
    let mut config = cx.file.config()?;
    let Some(root) = config.as_object_mut() else {
        return Err(ToolError::failed("the config is not an object"));
    };
    let section = root.entry("code_execution").or_insert_with(|| json!({}));
    let Some(section) = section.as_object_mut() else {
        return Err(ToolError::failed("code_execution is not an object"));
    };
    section.insert("packages".into(), packages);
    // The runtime's own write for the tool the owner enabled (as mcp_install writes
    // mcp.servers); the schema still applies (CFG-43: at most 50 entries).
    cx.file.config_replace(adf_store::Caller::Owner, config)?;
    Ok(())
}

fn name_arg(args: &Value) -> Result<String, ToolError> {
    args.get("name")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .ok_or_else(|| ToolError::invalid("name is required"))
}

impl Tool for NpmInstall {
    adf_runtime::declare_tool! {
        name: "npm_install",
        description: "Install an npm package (pure JavaScript/WASM only; native addons are refused) for sys_code and lambdas; importable from the next run. Limits: 50 MB per package, 200 MB total, 50 packages.",
        parameters: json!({
            "type": "object",
            "properties": {
                "name": { "type": "string", "description": "the npm package name" },
                "version": { "type": "string", "description": "a version, semver range or dist-tag (default latest)" }
            },
            "required": ["name"],
            "additionalProperties": false
        }),
    }

    fn run(&self, cx: &mut ToolContext<'_>, args: Value) -> Result<Value, ToolError> {
        let name = name_arg(&args)?;
        let range = args
            .get("version")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let packages = packages_of(cx.config);
        let store = &self.store;
        let limits = self.limits;
        let outcome = std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .map_err(|e| ToolError::failed(format!("cannot start the install: {e}")))?;
                    Ok::<_, ToolError>(runtime.block_on(async {
                        let installer = Installer::new(store, limits)?;
                        installer
                            .install(&packages, &name, range.as_deref(), &|_| {})
                            .await
                    }))
                })
                .join()
                .unwrap_or_else(|_| {
                    Err(ToolError::new(
                        ErrorCode::InternalError,
                        "the install stopped on an internal error",
                    ))
                })
        })?;
        match outcome {
            Ok(outcome) => {
                if !outcome.already_installed {
                    write_packages(cx, outcome.packages.clone())?;
                }
                Ok(outcome.to_json())
            }
            Err(refusal) => Ok(refusal.to_json()),
        }
    }
}

impl Tool for NpmUninstall {
    adf_runtime::declare_tool! {
        name: "npm_uninstall",
        description: "Remove an npm package from this agent's packages; it cannot be imported from the next run (the shared store keeps its files).",
        parameters: json!({
            "type": "object",
            "properties": { "name": { "type": "string" } },
            "required": ["name"],
            "additionalProperties": false
        }),
    }

    fn run(&self, cx: &mut ToolContext<'_>, args: Value) -> Result<Value, ToolError> {
        let name = name_arg(&args)?;
        let Some(next) = crate::uninstall(&packages_of(cx.config), &name) else {
            return Err(ToolError::not_found(format!(
                "'{name}' is not in code_execution.packages"
            )));
        };
        write_packages(cx, next)?;
        Ok(json!({ "success": true, "name": name, "removed": true }))
    }
}
