//! Identity commands: the owner identity in the runtime home (`adf owner …`), an agent's identity
//! and sealed credentials (`adf identity …`) and `adf claim`.
//!
//! Secrets (mnemonic, credential values, share passwords) come in on stdin, are held in
//! zeroizing buffers and are never printed, except the mnemonic by `adf owner export-mnemonic`,
//! whose whole purpose is to show it.

use std::io::{IsTerminal as _, Read as _};
use std::path::Path;
use std::process::ExitCode;

use adf_crypto::keys::b64;
use adf_runtime::home::RuntimeHome;
use adf_runtime::identity::{self, LocalKeys, StatusReport};
use adf_store::AdfFile;
use adf_store::check::Finding;
use anyhow::{Context as _, Result, bail};
use serde_json::json;
use zeroize::Zeroizing;

use crate::output::{Output, Table};
use crate::{Command, IdentityCommand, OwnerCommand};

/// Runs one identity command and returns the process exit code.
pub(crate) fn run(command: Command, out: Output) -> Result<ExitCode> {
    match command {
        Command::Owner(c) => owner(c, out),
        Command::Identity(IdentityCommand::Status { file }) => status(&file, out),
        Command::Identity(IdentityCommand::Set {
            file,
            purpose,
            code_access,
        }) => set(&file, &purpose, code_access, out),
        Command::Identity(IdentityCommand::List { file }) => list(&file, out),
        Command::Identity(IdentityCommand::Share { file }) => share(&file, out),
        Command::Claim {
            file,
            password_stdin,
        } => claim(&file, password_stdin, out),
        _ => bail!("not an identity command"),
    }
}

fn home() -> Result<RuntimeHome> {
    Ok(RuntimeHome::from_env()?)
}

/// Reads a secret from stdin into zeroizing memory, without one trailing line break.
fn read_secret_stdin(what: &str) -> Result<Zeroizing<String>> {
    let mut stdin = std::io::stdin();
    if stdin.is_terminal() {
        eprintln!("enter the {what}, then press Ctrl-D:");
    }
    let mut buf = Zeroizing::new(Vec::new());
    stdin
        .read_to_end(&mut buf)
        .with_context(|| format!("cannot read the {what} from stdin"))?;
    let mut text = Zeroizing::new(
        String::from_utf8(buf.to_vec())
            .map_err(|_| anyhow::anyhow!("the {what} on stdin is not UTF-8 text"))?,
    );
    if text.ends_with('\n') {
        text.pop();
        if text.ends_with('\r') {
            text.pop();
        }
    }
    if text.is_empty() {
        bail!("no {what} on stdin: pipe it in, e.g. `printf %s \"$VALUE\" | adf …`");
    }
    Ok(text)
}

/// The keys `adf new` provisions with: the owner is created on first use, with a one-line hint
/// on stderr to back up its recovery phrase (nothing extra on stdout, so `--json` stays clean).
pub(crate) fn keys_for_new() -> Result<LocalKeys> {
    let home = home()?;
    let (owner, created) = home.ensure_owner()?;
    if created {
        eprintln!(
            "created owner identity {} in {}; back up its recovery phrase with `adf owner export-mnemonic`",
            owner.identity.did(),
            home.dir().display()
        );
    }
    Ok(LocalKeys::new(Some(owner.identity), Some(home.runtime()?)))
}

/// The identity findings `adf check` adds. Read-only: keys are used only if they already exist
/// in the home, and public facts are verified without them.
pub(crate) fn check_findings(file: &AdfFile) -> Result<Vec<Finding>> {
    // Older schemas lack the identity tables' current shape; check already says to migrate.
    if file.schema_version()? != adf_store::schema::SCHEMA_VERSION {
        return Ok(Vec::new());
    }
    let keys = RuntimeHome::from_env()
        .ok()
        .and_then(|h| LocalKeys::existing(&h).ok());
    Ok(identity::verify(file, keys.as_ref())?)
}

fn owner(command: OwnerCommand, out: Output) -> Result<ExitCode> {
    let home = home()?;
    match command {
        OwnerCommand::Init { force } => {
            let owner = home.init_owner(force)?;
            let runtime = home.runtime()?;
            let body = json!({
                "created": true,
                "owner_did": owner.identity.did(),
                "runtime_did": runtime.did(),
                "home": home.dir().display().to_string(),
            });
            out.emit(&body, || {
                println!("created owner identity {}", owner.identity.did());
                println!("  home     {}", home.dir().display());
                println!("  runtime  {}", runtime.did());
                println!(
                    "Back up its recovery phrase now with `adf owner export-mnemonic` and keep it offline:"
                );
                println!("it is the only way to open your agents' owner slots on another machine.");
            })?;
        }
        OwnerCommand::Show => {
            let owner = home.owner()?;
            let runtime = home.load_runtime()?;
            let body = json!({
                "owner_did": owner.identity.did(),
                "owner_encryption_public_key": b64(&owner.identity.public().encryption_public_key),
                "created_at": owner.created_at,
                "has_recovery_phrase": owner.mnemonic().is_some(),
                "runtime_did": runtime.as_ref().map(|r| r.did()),
                "home": home.dir().display().to_string(),
            });
            out.emit(&body, || {
                let mut table = Table::new(&["field", "value"]);
                table.row(vec!["owner".into(), owner.identity.did()]);
                table.row(vec![
                    "encryption key".into(),
                    body["owner_encryption_public_key"]
                        .as_str()
                        .unwrap_or_default()
                        .into(),
                ]);
                table.row(vec![
                    "created".into(),
                    owner.created_at.clone().unwrap_or_else(|| "-".into()),
                ]);
                table.row(vec![
                    "recovery phrase".into(),
                    if owner.mnemonic().is_some() {
                        "stored (adf owner export-mnemonic)".into()
                    } else {
                        "not stored".into()
                    },
                ]);
                table.row(vec![
                    "runtime".into(),
                    runtime
                        .as_ref()
                        .map(|r| r.did())
                        .unwrap_or_else(|| "(not generated yet)".into()),
                ]);
                table.row(vec!["home".into(), home.dir().display().to_string()]);
                table.print();
            })?;
        }
        OwnerCommand::ExportMnemonic => {
            let owner = home.owner()?;
            let Some(mnemonic) = owner.mnemonic() else {
                return Err(
                    adf_runtime::home::HomeError::NoMnemonic(home.dir().to_path_buf()).into(),
                );
            };
            eprintln!(
                "warning: this recovery phrase controls every agent this owner provisioned; keep it secret and offline"
            );
            if out.json {
                let body = Zeroizing::new(
                    json!({ "owner_did": owner.identity.did(), "mnemonic": mnemonic }).to_string(),
                );
                println!("{}", body.as_str());
            } else {
                println!("{mnemonic}");
            }
        }
        OwnerCommand::Import { force } => {
            let mnemonic = read_secret_stdin("recovery phrase")?;
            let existing = home.load_owner()?.map(|o| o.identity.did());
            let owner = home.import_owner(mnemonic.trim(), force)?;
            let runtime = home.runtime()?;
            let replaced = existing.as_ref().filter(|d| **d != owner.identity.did());
            let body = json!({
                "owner_did": owner.identity.did(),
                "replaced_owner_did": replaced,
                "unchanged": existing.as_deref() == Some(owner.identity.did().as_str()),
                "runtime_did": runtime.did(),
                "home": home.dir().display().to_string(),
            });
            out.emit(&body, || {
                println!("imported owner identity {}", owner.identity.did());
                if let Some(old) = replaced {
                    println!("  replaced {old}: files it provisioned are foreign here now");
                }
                println!("  home     {}", home.dir().display());
            })?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn status(path: &Path, out: Output) -> Result<ExitCode> {
    let home = home()?;
    let keys = LocalKeys::from_home(&home)?;
    let mut file = crate::session::open(path)?;
    let open = identity::open_identity(&mut file, &keys)?;
    let report = identity::status(&file, &keys, &open)?;
    file.close()?;
    out.emit(&report, || print_status(path, &report))?;
    Ok(ExitCode::SUCCESS)
}

fn print_status(path: &Path, r: &StatusReport) {
    println!("{}", path.display());
    let mut table = Table::new(&["field", "value"]);
    let or_dash = |v: &Option<String>| v.clone().filter(|s| !s.is_empty()).unwrap_or("-".into());
    let mark = |did: &Option<String>, local: &Option<String>, label: &str| {
        let text = or_dash(did);
        if did.is_some() && did == local {
            format!("{text} ({label})")
        } else {
            text
        }
    };
    table.row(vec![
        "did".into(),
        if r.did.is_empty() {
            "-".into()
        } else {
            r.did.clone()
        },
    ]);
    if !r.did_history.is_empty() {
        table.row(vec!["previous dids".into(), r.did_history.join(", ")]);
    }
    table.row(vec![
        "owner".into(),
        mark(
            &r.owner_did,
            &r.local_owner_did,
            "this installation's owner",
        ),
    ]);
    table.row(vec![
        "runtime".into(),
        mark(&r.runtime_did, &r.local_runtime_did, "this installation"),
    ]);
    for (name, e) in [("identity", &r.identity), ("credentials", &r.credentials)] {
        let mut text = e.state.to_owned();
        if let Some(via) = e.unlocked_via {
            text.push_str(&format!(" via {via} slot"));
        }
        if r.runtime_slot_added.contains(&name) {
            text.push_str("; runtime slot added for this installation");
        }
        let slots: Vec<String> = e
            .slots
            .iter()
            .map(|s| {
                if s.local {
                    format!("{}*", s.kind)
                } else {
                    s.kind.clone()
                }
            })
            .collect();
        text.push_str(&format!(
            " [slots: {}; {} sealed]",
            if slots.is_empty() {
                "none".into()
            } else {
                slots.join(", ")
            },
            e.sealed_rows
        ));
        table.row(vec![name.into(), text]);
    }
    table.row(vec![
        "password protected".into(),
        r.password_protected.to_string(),
    ]);
    table.row(vec!["attestations".into(), r.attestations.join(", ")]);
    table.print();
    match r.provisioned {
        Some(identity::Provisioned::KeptExistingKey) => println!(
            "provisioned: sealed the existing key (DID kept){}",
            sealed_note(r.sealed_plain_rows)
        ),
        Some(identity::Provisioned::NewKey) => println!(
            "provisioned: new key and DID{}",
            sealed_note(r.sealed_plain_rows)
        ),
        None => {}
    }
    if r.identity.state == "foreign" {
        println!(
            "this file's identity belongs to another owner or installation; `adf claim {}` gives it a new DID owned here",
            path.display()
        );
    }
    if r.local_owner_did.is_none() {
        println!(
            "no owner identity on this installation: run `adf owner init` or `adf owner import`"
        );
    }
    println!("(* = a slot this installation can open)");
}

fn sealed_note(n: usize) -> String {
    if n == 0 {
        String::new()
    } else {
        format!("; sealed {n} plain secret(s) into credentials")
    }
}

fn set(path: &Path, purpose: &str, code_access: bool, out: Output) -> Result<ExitCode> {
    let home = home()?;
    let keys = LocalKeys::from_home(&home)?;
    let value = read_secret_stdin("secret value")?;
    let mut file = crate::session::open(path)?;
    let open = identity::open_identity(&mut file, &keys)?;
    identity::set_credential(&mut file, &open, purpose, value.as_bytes(), code_access)?;
    file.close()?;
    let message = format!("sealed {purpose} into the credentials envelope");
    out.emit(
        &json!({ "ok": true, "purpose": purpose, "encryption_algo": "env:credentials" }),
        || println!("{message}"),
    )?;
    Ok(ExitCode::SUCCESS)
}

fn list(path: &Path, out: Output) -> Result<ExitCode> {
    let file = AdfFile::inspect(path)?;
    let rows = identity::list_purposes(&file)?;
    out.emit(&rows, || {
        let mut table = Table::new(&["purpose", "storage", "code access"]);
        for r in &rows {
            table.row(vec![
                r.purpose.clone(),
                r.encryption_algo.clone(),
                if r.runtime_key {
                    "never (runtime key)".into()
                } else {
                    r.code_access.to_string()
                },
            ]);
        }
        table.print();
    })?;
    Ok(ExitCode::SUCCESS)
}

fn share(path: &Path, out: Output) -> Result<ExitCode> {
    let home = home()?;
    let keys = LocalKeys::from_home(&home)?;
    let password = read_secret_stdin("share password")?;
    let mut file = crate::session::open(path)?;
    let open = identity::open_identity(&mut file, &keys)?;
    identity::share_credentials(&mut file, &open, &password)?;
    file.close()?;
    out.emit(
        &json!({ "ok": true, "envelope": "credentials", "slot": "password" }),
        || {
            println!("added a password slot to the credentials envelope of {}", path.display());
            println!(
                "the recipient adopts the credentials with `adf claim FILE --password-stdin`; the identity is never shared"
            );
        },
    )?;
    Ok(ExitCode::SUCCESS)
}

fn claim(path: &Path, password_stdin: bool, out: Output) -> Result<ExitCode> {
    let home = home()?;
    let keys = LocalKeys::from_home(&home)?;
    let password = if password_stdin {
        Some(read_secret_stdin("share password")?)
    } else {
        None
    };
    let mut file = crate::session::open(path)?;
    let (outcome, mut open) = identity::claim(&mut file, &keys)?;
    let mut adopted = false;
    if let Some(password) = &password {
        if open.is_unlocked(adf_crypto::EnvelopeName::Credentials) {
            eprintln!("the credentials already open here; the password was not needed");
        } else {
            identity::adopt_shared_credentials(&mut file, &keys, &mut open, password)
                .context("cannot adopt the shared credentials")?;
            adopted = true;
        }
    }
    file.close()?;
    let body = json!({
        "did": outcome.did,
        "previous_did": outcome.previous_did,
        "provisioned": outcome.provisioned,
        "credentials_replaced": outcome.credentials_replaced,
        "credentials_adopted": adopted,
    });
    out.emit(&body, || {
        match &outcome.previous_did {
            Some(old) => println!("claimed {}: {old} -> {}", path.display(), outcome.did),
            None => println!("provisioned {}: {}", path.display(), outcome.did),
        }
        if outcome.credentials_replaced {
            println!("  the foreign credentials could not be opened and were replaced by an empty envelope");
        }
        if adopted {
            println!("  adopted the shared credentials (password slot removed)");
        }
    })?;
    Ok(ExitCode::SUCCESS)
}
