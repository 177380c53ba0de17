//! `AdfFile::fork_to`: the copy holds the parent's state as a different agent (new id, name
//! and handle, lineage to the parent's DID, no identity rows), the parent is left as it was,
//! and a refused fork leaves nothing behind.

use adf_store::{AdfFile, Caller, CreateOptions, FileWrite, ForkOptions, IdentityRow, StoreError};

fn parent(dir: &std::path::Path) -> AdfFile {
    let mut file = AdfFile::create(
        dir.join("parent.adf"),
        &CreateOptions {
            name: Some("Parent".into()),
            id: Some("parent-id".into()),
            ..CreateOptions::default()
        },
    )
    .unwrap();
    file.file_write(
        Caller::Owner,
        "notes/plan.md",
        b"step one",
        &FileWrite::default(),
    )
    .unwrap();
    file.identity_put(&[IdentityRow {
        purpose: "provider:openai:apiKey".into(),
        value: b"sealed".to_vec(),
        encryption_algo: "plain".into(),
        salt: None,
        kdf_params: None,
        code_access: false,
    }])
    .unwrap();
    file.identity_apply(&adf_store::IdentityWrite {
        meta: vec![("adf_did".into(), "did:key:zParent".into())],
        ..Default::default()
    })
    .unwrap();
    file
}

fn options(name: &str) -> ForkOptions {
    ForkOptions {
        name: name.into(),
        handle: None,
        id: Some("fork-id".into()),
    }
}

#[test]
fn fork_copies_state_under_a_new_id_handle_and_no_identity() {
    let dir = tempfile::tempdir().unwrap();
    let parent = parent(dir.path());
    let copy = parent
        .fork_to(&dir.path().join("copy.adf"), &options("Scout Two"))
        .unwrap();

    let config = copy.config().unwrap();
    assert_eq!(config["id"], "fork-id");
    assert_eq!(config["name"], "Scout Two");
    assert_eq!(config["handle"], "scout-two");
    let meta = |file: &AdfFile, key: &str| file.meta_get(key).unwrap().map(|m| m.value);
    assert_eq!(meta(&copy, "adf_handle").as_deref(), Some("scout-two"));
    assert_eq!(meta(&copy, "adf_name").as_deref(), Some("Scout Two"));
    assert_eq!(meta(&copy, "adf_did").as_deref(), Some(""));
    assert_eq!(
        meta(&copy, "adf_parent_did").as_deref(),
        Some("did:key:zParent")
    );
    assert!(copy.identity_rows().unwrap().is_empty());
    let plan = copy.file_read("notes/plan.md").unwrap().unwrap();
    assert_eq!(plan.content, b"step one");

    // The parent is only read.
    assert_eq!(parent.config().unwrap()["id"], "parent-id");
    assert_eq!(parent.identity_rows().unwrap().len(), 1);
    assert_eq!(meta(&parent, "adf_did").as_deref(), Some("did:key:zParent"));
}

#[test]
fn fork_refuses_an_existing_target_and_an_empty_name_leaving_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let parent = parent(dir.path());
    let taken = dir.path().join("taken.adf");
    std::fs::write(&taken, b"someone else's").unwrap();
    let err = parent.fork_to(&taken, &options("Taken")).unwrap_err();
    assert!(matches!(err, StoreError::FileExists { .. }), "{err}");
    assert_eq!(std::fs::read(&taken).unwrap(), b"someone else's");

    let target = dir.path().join("unnamed.adf");
    assert!(parent.fork_to(&target, &options("  ")).is_err());
    assert!(!target.exists());
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with("parent.adf"))
        .collect();
    names.sort();
    assert_eq!(names, ["taken.adf"], "no scratch copy is left");
}
