//! `adf packages FILE [list|install NAME[@RANGE]|remove NAME]`: the owner's view of an agent's
//! npm packages (`code_execution.packages`) over the installation's shared store
//! (adf-packages), the same install `npm_install` runs, with progress on stderr.

use std::path::Path;
use std::process::ExitCode;

use adf_packages::{PackageStore, agent_entries, package_id};
use adf_runtime::home::RuntimeHome;
use adf_store::{Caller, ConfigAction};
use anyhow::{Result, bail};
use serde_json::{Value, json};

use crate::PackagesAction;
use crate::output::{Output, Table};

/// `lodash@^4` → (`lodash`, `^4`); `@s/n@1` → (`@s/n`, `1`); no `@RANGE` → `None`.
fn split_spec(spec: &str) -> (&str, Option<&str>) {
    let from = usize::from(spec.starts_with('@'));
    match spec[from..].find('@') {
        Some(at) => (&spec[..from + at], Some(&spec[from + at + 1..])),
        None => (spec, None),
    }
}

fn packages_of(config: &Value) -> Value {
    config
        .pointer("/code_execution/packages")
        .cloned()
        .unwrap_or(json!([]))
}

/// Runs one `adf packages` command.
pub(crate) fn run(file: &Path, action: Option<PackagesAction>, out: Output) -> Result<ExitCode> {
    let home = RuntimeHome::from_env()?;
    let store = PackageStore::for_home(home.dir());
    match action.unwrap_or(PackagesAction::List) {
        PackagesAction::List => list(file, &store, out),
        PackagesAction::Install { spec } => install(file, &store, &spec, out),
        PackagesAction::Remove { name } => remove(file, &name, out),
    }
}

fn list(file: &Path, store: &PackageStore, out: Output) -> Result<ExitCode> {
    let handle = crate::session::open_read(file)?;
    let packages = packages_of(&handle.config()?);
    let rows: Vec<Value> = agent_entries(&packages)
        .into_iter()
        .map(|(name, version)| {
            let id = package_id(&name, &version);
            let installed = store.record(&id).is_some();
            let size = store.closure_size([id]);
            json!({ "name": name, "version": version, "installed": installed, "size_bytes": size })
        })
        .collect();
    out.emit(&rows, || {
        if rows.is_empty() {
            println!("no npm packages in {}", file.display());
            return;
        }
        let mut table = Table::new(&["NAME", "VERSION", "IN STORE", "SIZE"]);
        for row in &rows {
            table.row(vec![
                row["name"].as_str().unwrap_or_default().to_owned(),
                row["version"].as_str().unwrap_or_default().to_owned(),
                if row["installed"] == true {
                    "yes"
                } else {
                    "no (npm_install it again)"
                }
                .to_owned(),
                format!(
                    "{:.1} MB",
                    row["size_bytes"].as_f64().unwrap_or(0.0) / 1_048_576.0
                ),
            ]);
        }
        table.print();
    })?;
    Ok(ExitCode::SUCCESS)
}

fn install(file: &Path, store: &PackageStore, spec: &str, out: Output) -> Result<ExitCode> {
    let (name, range) = split_spec(spec);
    let mut handle = crate::session::open(file)?;
    let packages = packages_of(&handle.config()?);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let quiet = out.json;
    let progress = move |line: &str| {
        if !quiet {
            eprintln!("  {line}");
        }
    };
    let outcome = runtime.block_on(adf_packages::install(
        store, &packages, name, range, &progress,
    ));
    match outcome {
        Ok(outcome) => {
            if !outcome.already_installed {
                handle.config_set_path(
                    Caller::Owner,
                    "code_execution.packages",
                    ConfigAction::Set,
                    outcome.packages.clone(),
                )?;
            }
            handle.close()?;
            out.emit(&outcome.to_json(), || {
                if outcome.already_installed {
                    println!("{}@{} is already installed", outcome.name, outcome.version);
                } else {
                    println!(
                        "installed {}@{} ({} MB with its dependencies); agent code imports it from its next run",
                        outcome.name, outcome.version, outcome.size_mb
                    );
                }
            })?;
            Ok(ExitCode::SUCCESS)
        }
        Err(refusal) => {
            handle.close()?;
            if out.json {
                out.emit(&refusal.to_json(), || {})?;
                return Ok(ExitCode::FAILURE);
            }
            bail!(
                "{name} was not installed ({}): {}",
                refusal.error,
                refusal.message
            )
        }
    }
}

fn remove(file: &Path, name: &str, out: Output) -> Result<ExitCode> {
    let mut handle = crate::session::open(file)?;
    let packages = packages_of(&handle.config()?);
    let Some(next) = adf_packages::uninstall(&packages, name) else {
        handle.close()?;
        bail!(
            "'{name}' is not in code_execution.packages of {}",
            file.display()
        );
    };
    handle.config_set_path(
        Caller::Owner,
        "code_execution.packages",
        ConfigAction::Set,
        next,
    )?;
    handle.close()?;
    out.emit(
        &json!({ "success": true, "name": name, "removed": true }),
        || {
            println!(
                "removed {name} from {} (the shared store keeps its files)",
                file.display()
            );
        },
    )?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::split_spec;

    #[test]
    fn specs() {
        assert_eq!(split_spec("lodash"), ("lodash", None));
        assert_eq!(split_spec("lodash@^4"), ("lodash", Some("^4")));
        assert_eq!(split_spec("@s/n"), ("@s/n", None));
        assert_eq!(split_spec("@s/n@latest"), ("@s/n", Some("latest")));
    }
}
