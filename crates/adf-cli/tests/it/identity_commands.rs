//! The identity commands run as a user runs them: the real `adf` binary, a runtime home
//! (`ADF_HOME`) in a temp dir, the owner imported from the BIP-39 test mnemonic, and copies of the
//! reference fixtures.
use std::path::{Path, PathBuf};

use adf_crypto::envelope::{EnvelopeDescriptor, EnvelopeName, Slot, SlotKind};
use adf_crypto::keys::b64;
use adf_store::AdfFile;
use adf_testkit::fixtures::{
    MINIMAL_DID, STUDIO_DID, STUDIO_OWNER_DID, STUDIO_PROVIDER_KEY, TEST_MNEMONIC,
};
use assert_cmd::Command;
use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    crate::common::fixture(name)
}

/// A temp dir holding a runtime home and agent files.
struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    fn new() -> Self {
        Sandbox {
            dir: tempfile::tempdir().unwrap(),
        }
    }
    fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }
    fn adf(&self) -> Command {
        let mut cmd = Command::cargo_bin("adf").unwrap();
        cmd.env("ADF_HOME", self.home()).env_remove("ADF_LOG");
        cmd
    }
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
    fn copy(&self, name: &str) -> PathBuf {
        let path = self.path(name);
        std::fs::copy(fixture(name), &path).unwrap();
        path
    }
    fn import_test_owner(&self) {
        self.adf()
            .args(["owner", "import"])
            .write_stdin(format!("{TEST_MNEMONIC}\n"))
            .assert()
            .success();
    }
    fn json(&self, args: &[&str], file: Option<&Path>) -> Value {
        let mut cmd = self.adf();
        cmd.arg("--json").args(args);
        if let Some(f) = file {
            cmd.arg(f);
        }
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "{args:?}: not JSON ({e}): {}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
    }
}

/// Runs `adf <args> <path>` in `sandbox` with `stdin`; the command must succeed.
fn succeeds_with_stdin(
    sandbox: &Sandbox,
    args: &[&str],
    path: &Path,
    stdin: &str,
) -> std::process::Output {
    let out = sandbox
        .adf()
        .args(args)
        .arg(path)
        .write_stdin(stdin.to_owned())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn descriptor(path: &Path, e: EnvelopeName) -> (Vec<u8>, EnvelopeDescriptor) {
    let file = AdfFile::inspect(path).unwrap();
    let row = file
        .identity_rows()
        .unwrap()
        .into_iter()
        .find(|r| r.purpose == e.descriptor_purpose())
        .unwrap();
    let d = EnvelopeDescriptor::from_json_bytes(&row.value).unwrap();
    (row.value, d)
}

fn identity_row(path: &Path, purpose: &str) -> Option<adf_store::IdentityRow> {
    AdfFile::inspect(path)
        .unwrap()
        .identity_rows()
        .unwrap()
        .into_iter()
        .find(|r| r.purpose == purpose)
}

#[test]
fn owner_commands_import_show_export_and_refuse_to_overwrite() {
    let sb = Sandbox::new();
    let out = sb.adf().args(["owner", "show"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("adf owner init"));

    let imported = {
        let out = sb
            .adf()
            .args(["--json", "owner", "import"])
            .write_stdin(format!("  {TEST_MNEMONIC}  \n"))
            .output()
            .unwrap();
        assert!(out.status.success());
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    assert_eq!(imported["owner_did"], STUDIO_OWNER_DID);
    let show = sb.json(&["owner", "show"], None);
    assert_eq!(show["owner_did"], STUDIO_OWNER_DID);
    assert_eq!(show["has_recovery_phrase"], true);
    assert!(
        show["runtime_did"]
            .as_str()
            .unwrap()
            .starts_with("did:key:z")
    );

    let export = sb
        .adf()
        .args(["owner", "export-mnemonic"])
        .output()
        .unwrap();
    assert!(export.status.success());
    assert_eq!(
        String::from_utf8_lossy(&export.stdout).trim(),
        TEST_MNEMONIC
    );
    let export = sb.json(&["owner", "export-mnemonic"], None);
    assert_eq!(export["mnemonic"], TEST_MNEMONIC);

    let refused = sb.adf().args(["owner", "init"]).output().unwrap();
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains("--force") && err.contains(STUDIO_OWNER_DID),
        "{err}"
    );
    let bad = sb
        .adf()
        .args(["owner", "import", "--force"])
        .write_stdin("abandon secretword\n")
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(!String::from_utf8_lossy(&bad.stderr).contains("secretword"));
    let init = sb.json(&["owner", "init", "--force"], None);
    assert_ne!(init["owner_did"], STUDIO_OWNER_DID);

    for args in [
        vec!["owner", "--help"],
        vec!["owner", "init", "--help"],
        vec!["owner", "show", "--help"],
        vec!["owner", "export-mnemonic", "--help"],
        vec!["owner", "import", "--help"],
        vec!["identity", "--help"],
        vec!["identity", "status", "--help"],
        vec!["identity", "set", "--help"],
        vec!["identity", "list", "--help"],
        vec!["identity", "share", "--help"],
        vec!["claim", "--help"],
    ] {
        sb.adf().args(&args).assert().success();
    }
}

#[test]
fn idn_01_adf_new_provisions_an_identity_and_creates_the_owner_on_first_use() {
    let sb = Sandbox::new();
    let path = sb.path("fresh.adf");
    let out = sb
        .adf()
        .args(["--json", "new"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(out.status.success());
    // --json: stdout is exactly one JSON document; the backup hint goes to stderr.
    let body: Value = serde_json::from_slice(&out.stdout).unwrap();
    let did = body["did"].as_str().unwrap();
    assert!(did.starts_with("did:key:z6Mk"), "{body}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("adf owner export-mnemonic"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    // A second file reuses the owner silently.
    let out = sb
        .adf()
        .arg("new")
        .arg(sb.path("second.adf"))
        .output()
        .unwrap();
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let check = sb.json(&["check"], Some(&path));
    assert_eq!(check["errors"], 0, "{check:#}");
    assert_eq!(check["warnings"], 0, "{check:#}");
    // Without this installation's keys, check still verifies the public facts.
    let stranger = Sandbox::new();
    let check = stranger.json(&["check"], Some(&path));
    assert_eq!(check["errors"], 0, "{check:#}");
    assert!(!stranger.home().exists(), "check never creates a home");

    let status = sb.json(&["identity", "status"], Some(&path));
    assert_eq!(status["did"], did);
    assert_eq!(status["identity"]["state"], "unlocked");
    assert_eq!(status["credentials"]["state"], "unlocked");
    assert_eq!(
        status["attestations"],
        serde_json::json!(["owner", "operator"])
    );
}

#[test]
fn idn_17_idn_18_status_of_the_studio_fixture_unlocks_through_the_owner_then_adopts_a_runtime_slot()
{
    let sb = Sandbox::new();
    sb.import_test_owner();
    let path = sb.copy("studio-identity.adf");
    let status = sb.json(&["identity", "status"], Some(&path));
    assert_eq!(status["did"], STUDIO_DID);
    assert_eq!(status["identity"]["state"], "unlocked");
    assert_eq!(status["identity"]["unlocked_via"], "owner");
    assert_eq!(status["credentials"]["state"], "unlocked");
    assert_eq!(status["credentials"]["unlocked_via"], "owner");
    assert_eq!(
        status["runtime_slot_added"],
        serde_json::json!(["identity", "credentials"])
    );
    let runtime = status["local_runtime_did"].as_str().unwrap().to_owned();
    for e in EnvelopeName::ALL {
        let (_, d) = descriptor(&path, e);
        assert!(
            d.key_slots(SlotKind::Runtime)
                .any(|s| s.recipient_did == runtime)
        );
    }
    let again = sb.json(&["identity", "status"], Some(&path));
    assert_eq!(again["identity"]["unlocked_via"], "runtime");
    assert_eq!(again["credentials"]["unlocked_via"], "runtime");
    assert_eq!(again["runtime_slot_added"], serde_json::json!([]));
    let check = sb.json(&["check"], Some(&path));
    assert_eq!(check["errors"], 0, "{check:#}");

    // Human output names the states too.
    let human = sb
        .adf()
        .args(["identity", "status"])
        .arg(&path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(text.contains("unlocked via runtime slot"), "{text}");
}

#[test]
fn idn_24_status_of_a_foreign_file_changes_nothing() {
    let sb = Sandbox::new();
    let path = sb.copy("studio-identity.adf");
    // No owner here: the runtime identity is generated, the file is only migrated.
    let status = sb.json(&["identity", "status"], Some(&path));
    assert_eq!(status["identity"]["state"], "foreign");
    assert_eq!(status["credentials"]["state"], "foreign");
    assert_eq!(status["local_owner_did"], Value::Null);
    let out = sb
        .adf()
        .args(["identity", "set"])
        .arg(&path)
        .arg("x")
        .write_stdin("v")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("foreign") && err.contains("adf owner import"),
        "{err}"
    );
}

#[test]
fn idn_11_identity_set_seals_into_credentials_and_list_shows_no_values() {
    let sb = Sandbox::new();
    sb.import_test_owner();
    let path = sb.copy("studio-identity.adf");
    let out = sb
        .adf()
        .args(["identity", "set"])
        .arg(&path)
        .arg("adapter:telegram:TELEGRAM_BOT_TOKEN")
        .write_stdin("123456:telegram-secret-token\n")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("telegram-secret-token"));
    let row = identity_row(&path, "adapter:telegram:TELEGRAM_BOT_TOKEN").unwrap();
    assert_eq!(row.encryption_algo, "env:credentials");
    assert!(!row.code_access);

    // The runtime reads both the reference's provider key and ours (trailing newline dropped).
    let home = adf_runtime::home::RuntimeHome::at(sb.home());
    let keys = adf_runtime::identity::LocalKeys::from_home(&home).unwrap();
    let mut file = AdfFile::open(&path).unwrap();
    let open = adf_runtime::identity::open_identity(&mut file, &keys).unwrap();
    let read = |p: &str| {
        adf_runtime::identity::read_credential(&file, &open, p)
            .unwrap()
            .unwrap()
            .to_vec()
    };
    assert_eq!(
        read("provider:openai-main:apiKey"),
        STUDIO_PROVIDER_KEY.as_bytes()
    );
    assert_eq!(
        read("adapter:telegram:TELEGRAM_BOT_TOKEN"),
        b"123456:telegram-secret-token"
    );
    drop(file);

    let list = sb.json(&["identity", "list"], Some(&path));
    let purposes: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["purpose"].as_str().unwrap())
        .collect();
    assert!(purposes.contains(&"provider:openai-main:apiKey"));
    assert!(purposes.contains(&"adapter:telegram:TELEGRAM_BOT_TOKEN"));
    let text = list.to_string();
    assert!(!text.contains(STUDIO_PROVIDER_KEY) && !text.contains("telegram-secret-token"));
    assert!(
        list.as_array()
            .unwrap()
            .iter()
            .all(|r| r.get("value").is_none())
    );

    let refused = sb
        .adf()
        .args(["identity", "set"])
        .arg(&path)
        .arg("crypto:signing:private_key")
        .write_stdin("x")
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("reserved"));
}

#[test]
fn idn_15_idn_16_idn_20_share_adds_a_password_slot_to_credentials_only_and_claim_adopts_it() {
    let sender = Sandbox::new();
    sender.import_test_owner();
    let path = sender.path("shared.adf");
    sender.adf().arg("new").arg(&path).assert().success();
    sender
        .adf()
        .args(["identity", "set"])
        .arg(&path)
        .arg("provider:x:apiKey")
        .write_stdin("sk-shared-secret")
        .assert()
        .success();
    let (identity_before, _) = descriptor(&path, EnvelopeName::Identity);
    let out = succeeds_with_stdin(
        &sender,
        &["--json", "identity", "share"],
        &path,
        "a long share password\n",
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("a long share password"));
    let (identity_after, d) = descriptor(&path, EnvelopeName::Identity);
    assert_eq!(
        identity_after, identity_before,
        "identity never gets a password slot"
    );
    assert!(!d.has_password_slot());
    let (_, creds) = descriptor(&path, EnvelopeName::Credentials);
    let slots: Vec<_> = creds
        .slots
        .iter()
        .filter_map(|s| match s {
            Slot::Password(p) => Some(p),
            _ => None,
        })
        .collect();
    assert_eq!(slots.len(), 1);
    assert_eq!(
        (
            slots[0].kdf.as_str(),
            slots[0].params.n,
            slots[0].params.r,
            slots[0].params.p
        ),
        ("scrypt", 131_072, 8, 1)
    );

    // The recipient claims the file and adopts the credentials with the password.
    let recipient = Sandbox::new();
    recipient.adf().args(["owner", "init"]).assert().success();
    let status = recipient.json(&["identity", "status"], Some(&path));
    assert_eq!(status["credentials"]["state"], "locked");
    let out = succeeds_with_stdin(
        &recipient,
        &["--json", "claim", "--password-stdin"],
        &path,
        "a long share password\n",
    );
    let body: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(body["credentials_adopted"], true);
    assert_eq!(body["credentials_replaced"], false);
    let (_, creds) = descriptor(&path, EnvelopeName::Credentials);
    assert!(!creds.has_password_slot());
    assert_eq!(creds.slots.len(), 2);
    let status = recipient.json(&["identity", "status"], Some(&path));
    assert_eq!(status["credentials"]["state"], "unlocked");
    assert_eq!(status["identity"]["state"], "unlocked");
}

#[test]
fn idn_26_claim_of_a_foreign_file_creates_a_new_did_with_a_clone_attestation() {
    let sb = Sandbox::new();
    sb.adf().args(["owner", "init"]).assert().success();
    let path = sb.copy("studio-identity.adf");
    let claimed = sb.json(&["claim"], Some(&path));
    assert_eq!(claimed["previous_did"], STUDIO_DID);
    let did = claimed["did"].as_str().unwrap().to_owned();
    assert_ne!(did, STUDIO_DID);
    let status = sb.json(&["identity", "status"], Some(&path));
    assert_eq!(status["did"], did.as_str());
    assert_eq!(status["did_history"], serde_json::json!([STUDIO_DID]));
    assert_eq!(status["identity"]["state"], "unlocked");
    assert!(
        status["attestations"]
            .as_array()
            .unwrap()
            .contains(&Value::from("clone"))
    );
    let file = AdfFile::inspect(&path).unwrap();
    let clone = file
        .attestations()
        .unwrap()
        .into_iter()
        .find(|a| a.role == "clone")
        .unwrap();
    assert_eq!(clone.scope.as_deref(), Some(STUDIO_DID));
    assert_eq!(clone.subject, did);
    drop(file);
    let check = sb.json(&["check"], Some(&path));
    assert_eq!(check["errors"], 0, "{check:#}");
    // Claiming a file that is already ours is refused with an explanation.
    let again = sb.adf().arg("claim").arg(&path).output().unwrap();
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("nothing to claim"));
}

#[test]
fn idn_02_the_plain_key_fixture_keeps_its_did_when_provisioned() {
    let sb = Sandbox::new();
    sb.import_test_owner();
    let path = sb.copy("minimal-headless.adf");
    sb.adf().arg("migrate").arg(&path).assert().success();
    // Before: check warns that the key is stored unencrypted.
    let check = sb.json(&["check"], Some(&path));
    assert!(
        check["findings"].to_string().contains("unencrypted"),
        "{check:#}"
    );
    let status = sb.json(&["identity", "status"], Some(&path));
    assert_eq!(status["provisioned"], "kept_existing_key");
    assert_eq!(status["did"], MINIMAL_DID);
    assert_eq!(status["identity"]["state"], "unlocked");
    assert_eq!(
        identity_row(&path, "crypto:signing:private_key")
            .unwrap()
            .encryption_algo,
        "env:identity"
    );
    let check = sb.json(&["check"], Some(&path));
    assert_eq!(check["errors"], 0, "{check:#}");
    assert_eq!(check["warnings"], 0, "{check:#}");
}

/// Every secret this installation and its files hold, in the encodings that could leak, and
/// the raw bytes of the keys that must never be on disk unwrapped (DEKs, agent keys).
fn secret_needles(sb: &Sandbox, files: &[&Path]) -> (Vec<String>, Vec<Vec<u8>>) {
    let mut raw: Vec<Vec<u8>> = Vec::new();
    let mut unwrapped: Vec<Vec<u8>> = Vec::new();
    for name in ["owner.json", "runtime.json"] {
        let doc: Value =
            serde_json::from_slice(&std::fs::read(sb.home().join(name)).unwrap()).unwrap();
        for field in ["signing_private_key_pkcs8", "encryption_private_key_pkcs8"] {
            let der = adf_crypto::keys::b64_decode(doc[field].as_str().unwrap(), field).unwrap();
            raw.push(der[16..].to_vec());
            raw.push(der);
        }
    }
    let home = adf_runtime::home::RuntimeHome::at(sb.home());
    let keys = adf_runtime::identity::LocalKeys::existing(&home).unwrap();
    let unlock_keys = adf_crypto::envelope::UnlockKeys {
        runtime: keys.runtime().map(|r| r.keys().encryption_secret()),
        owner: keys.owner().map(|o| o.keys().encryption_secret()),
    };
    for path in files {
        let rows: Vec<adf_crypto::IdentityRow> = AdfFile::inspect(path)
            .unwrap()
            .identity_rows()
            .unwrap()
            .into_iter()
            .map(|r| adf_crypto::IdentityRow {
                purpose: r.purpose,
                value: r.value,
                encryption_algo: r.encryption_algo,
                salt: r.salt,
                kdf_params: r.kdf_params,
                code_access: r.code_access,
            })
            .collect();
        let unlock =
            adf_crypto::provision::unlock_file(&rows, &unlock_keys, None, &mut rand_rng()).unwrap();
        for dek in [&unlock.deks.identity, &unlock.deks.credentials]
            .into_iter()
            .flatten()
        {
            unwrapped.push(dek.expose_secret().to_vec());
        }
        let agent = adf_crypto::provision::agent_signing_key(&rows, &unlock.deks, None).unwrap();
        unwrapped.push(agent.to_bytes().to_vec());
    }
    raw.extend(unwrapped.iter().cloned());
    let mut needles = vec![
        TEST_MNEMONIC.to_owned(),
        "abandon abandon".to_owned(),
        STUDIO_PROVIDER_KEY.to_owned(),
        "sk-hygiene-provider-key".to_owned(),
        "hygiene share password".to_owned(),
    ];
    for bytes in raw {
        needles.push(b64(&bytes));
        needles.push(b64(&bytes).trim_end_matches('=').to_owned());
        needles.push(bytes.iter().map(|b| format!("{b:02x}")).collect());
        needles.push(bytes.iter().map(|b| format!("{b:02X}")).collect());
    }
    (needles, unwrapped)
}

/// Every regular file under `dir`.
fn all_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            all_files(&path, out);
        } else {
            out.push(path);
        }
    }
}

fn rand_rng() -> impl rand::CryptoRng {
    rand::rng()
}

#[test]
fn idn_19_secrets_never_appear_in_any_output_or_on_disk_except_export_mnemonic() {
    let sb = Sandbox::new();
    let studio = sb.copy("studio-identity.adf");
    let minimal = sb.copy("minimal-headless.adf");
    let fresh = sb.path("fresh.adf");
    let foreign = sb.copy("populated-runtime.adf");
    let s = |p: &Path| p.display().to_string();
    let mut transcripts: Vec<(String, Vec<u8>, Vec<u8>)> = Vec::new();
    let mut run = |args: Vec<String>, stdin: Option<&str>| {
        for json in [false, true] {
            let mut cmd = sb.adf();
            // Trace-level logs too: nothing secret may reach them.
            cmd.env("ADF_LOG", "trace");
            if json {
                cmd.arg("--json");
            }
            cmd.args(&args);
            if let Some(input) = stdin {
                cmd.write_stdin(input.to_owned());
            }
            let out = cmd.output().unwrap();
            transcripts.push((format!("{json} {args:?}"), out.stdout, out.stderr));
        }
    };
    let v = |items: &[&str]| items.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
    run(v(&["owner", "import"]), Some(TEST_MNEMONIC));
    run(v(&["owner", "import"]), Some("abandon abandon not words"));
    run(v(&["owner", "init"]), None);
    run(v(&["owner", "show"]), None);
    run(v(&["new", &s(&fresh)]), None);
    for f in [&studio, &minimal, &fresh, &foreign] {
        run(v(&["identity", "status", &s(f)]), None);
        run(v(&["identity", "list", &s(f)]), None);
        run(v(&["check", &s(f)]), None);
        run(v(&["info", &s(f)]), None);
        run(v(&["meta", "get", &s(f)]), None);
    }
    run(
        v(&["identity", "set", &s(&fresh), "provider:openai:apiKey"]),
        Some("sk-hygiene-provider-key"),
    );
    run(
        v(&["identity", "set", &s(&fresh), "crypto:signing:private_key"]),
        Some("sk-hygiene-provider-key"),
    );
    run(
        v(&["identity", "share", &s(&fresh)]),
        Some("hygiene share password"),
    );
    run(
        v(&["claim", "--password-stdin", &s(&studio)]),
        Some("hygiene share password"),
    );
    run(v(&["claim", &s(&foreign)]), None);
    run(v(&["identity", "status", &s(&fresh)]), None);
    run(v(&["check", &s(&fresh)]), None);
    run(v(&["identity", "list", &s(&fresh)]), None);

    let (needles, unwrapped) = secret_needles(&sb, &[&studio, &minimal, &fresh]);
    assert!(needles.len() > 40);
    // IDN-19: no DEK or agent key is on disk unwrapped: agent files, sidecars, backups, home.
    let mut on_disk = Vec::new();
    all_files(sb.dir.path(), &mut on_disk);
    assert!(on_disk.len() >= 6, "{on_disk:?}");
    for path in &on_disk {
        let bytes = std::fs::read(path).unwrap();
        for key in &unwrapped {
            assert!(
                !bytes.windows(key.len()).any(|w| w == key.as_slice()),
                "{} holds an unwrapped key",
                path.display()
            );
        }
    }
    for (label, stdout, stderr) in &transcripts {
        for stream in [stdout, stderr] {
            let text = String::from_utf8_lossy(stream);
            for needle in &needles {
                assert!(
                    !text.contains(needle.as_str()),
                    "{label} printed a secret ({} chars)",
                    needle.len()
                );
            }
        }
    }
    // The one command whose job is to show a secret does show it.
    let export = sb
        .adf()
        .args(["owner", "export-mnemonic"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&export.stdout).contains(TEST_MNEMONIC));
}
