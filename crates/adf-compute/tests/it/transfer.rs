//! `fs_transfer` between the VFS and the workspaces: round trips, the size limit, links a
//! sandbox plants, and a copy into the VFS never being authorized code.

use serde_json::json;

use crate::common::{World, enabled, exec, one_sandbox_at_a_time, owner};

#[tokio::test]
async fn fs_transfer_round_trips_between_the_vfs_and_the_isolated_workspace() {
    let _one = one_sandbox_at_a_time().await;
    let world = World::new();
    let registry = world.registry();
    let mut file = world.agent("rt", enabled());
    owner(
        &registry,
        &mut file,
        "fs_write",
        json!({"mode": "write", "path": "data/in.csv", "content": "a,b\n1,2\n3,4\n"}),
    )
    .await
    .unwrap();
    let sent = owner(
        &registry,
        &mut file,
        "fs_transfer",
        json!({"from": "vfs", "to": "isolated", "path": "data/in.csv"}),
    )
    .await
    .unwrap();
    assert_eq!(sent["size"], 12, "{sent}");
    let summed = exec(
        &registry,
        &mut file,
        json!({"command": "mkdir -p out && python3 -c 'import csv; rows=list(csv.DictReader(open(\"data/in.csv\"))); open(\"out/sum.txt\",\"w\").write(str(sum(int(r[\"b\"]) for r in rows)))'"}),
    )
    .await;
    assert_eq!(summed["exit_code"], 0, "{summed}");
    owner(
        &registry,
        &mut file,
        "fs_transfer",
        json!({"from": "isolated", "to": "vfs", "path": "out/sum.txt", "save_as": "results/sum.txt"}),
    )
    .await
    .unwrap();
    let entry = file.file_read("results/sum.txt").unwrap().unwrap();
    assert_eq!(entry.content, b"6");
    assert!(!entry.info.authorized);

    // Code copied over an authorized file leaves it unauthorized.
    owner(
        &registry,
        &mut file,
        "fs_write",
        json!({"mode": "write", "path": "lib/tool.js", "content": "export const x = 1;"}),
    )
    .await
    .unwrap();
    file.file_set_authorized(adf_store::Caller::Owner, "lib/tool.js", true)
        .unwrap();
    exec(
        &registry,
        &mut file,
        json!({"command": "echo 'export const x = 2;' > tool.js"}),
    )
    .await;
    owner(
        &registry,
        &mut file,
        "fs_transfer",
        json!({"from": "isolated", "to": "vfs", "path": "tool.js", "save_as": "lib/tool.js"}),
    )
    .await
    .unwrap();
    let code = file.file_read("lib/tool.js").unwrap().unwrap();
    assert_eq!(code.content, b"export const x = 2;\n");
    assert!(
        !code.info.authorized,
        "a copied file kept its authorization"
    );
}

#[tokio::test]
async fn fs_transfer_refuses_files_over_the_size_limit_and_bad_paths() {
    let _one = one_sandbox_at_a_time().await;
    let world = World::new();
    let registry = world.registry();
    let mut file = world.agent("limits", enabled());
    let mut config = file.config().unwrap();
    config["limits"]["max_file_write_bytes"] = json!(100);
    file.config_replace(adf_store::Caller::Owner, config)
        .unwrap();
    let made = exec(
        &registry,
        &mut file,
        json!({"command": "head -c 101 /dev/zero > big.bin; head -c 100 /dev/zero > fits.bin"}),
    )
    .await;
    assert_eq!(made["exit_code"], 0, "{made}");
    let error = owner(
        &registry,
        &mut file,
        "fs_transfer",
        json!({"from": "isolated", "to": "vfs", "path": "big.bin"}),
    )
    .await
    .unwrap_err();
    assert!(
        error.message.contains("over the transfer limit of 100"),
        "{error:?}"
    );
    assert!(file.file_read("big.bin").unwrap().is_none());
    owner(
        &registry,
        &mut file,
        "fs_transfer",
        json!({"from": "isolated", "to": "vfs", "path": "fits.bin"}),
    )
    .await
    .unwrap();
    assert_eq!(
        file.file_read("fits.bin").unwrap().unwrap().content.len(),
        100
    );

    for path in ["../escape.txt", "/etc/hostname", "a/./b", ""] {
        let error = owner(
            &registry,
            &mut file,
            "fs_transfer",
            json!({"from": "isolated", "to": "vfs", "path": path}),
        )
        .await
        .unwrap_err();
        assert_eq!(error.code.as_str(), "INVALID_INPUT", "{path}: {error:?}");
    }
}

#[tokio::test]
async fn fs_transfer_never_follows_a_link_the_sandbox_planted() {
    let _one = one_sandbox_at_a_time().await;
    let world = World::new();
    let registry = world.registry();
    let host_file = world.dir.path().join("host-only.txt");
    std::fs::write(&host_file, "host-only-value").unwrap();
    let mut file = world.agent("links", enabled());
    let planted = exec(
        &registry,
        &mut file,
        json!({"command": format!("ln -s '{}' leak.txt && mkdir -p sub && ln -s '{}' dirlink", host_file.display(), world.dir.path().display())}),
    )
    .await;
    assert_eq!(planted["exit_code"], 0, "{planted}");
    for path in ["leak.txt", "dirlink/host-only.txt"] {
        let error = owner(
            &registry,
            &mut file,
            "fs_transfer",
            json!({"from": "isolated", "to": "vfs", "path": path}),
        )
        .await
        .unwrap_err();
        assert!(error.message.contains("symbolic link"), "{path}: {error:?}");
    }
    // Nor writes through one: the host file stays as it was.
    owner(
        &registry,
        &mut file,
        "fs_write",
        json!({"mode": "write", "path": "payload.txt", "content": "overwritten"}),
    )
    .await
    .unwrap();
    for save_as in ["leak.txt", "dirlink/host-only.txt"] {
        let error = owner(
            &registry,
            &mut file,
            "fs_transfer",
            json!({"from": "vfs", "to": "isolated", "path": "payload.txt", "save_as": save_as}),
        )
        .await
        .unwrap_err();
        assert!(
            error.message.contains("symbolic link"),
            "{save_as}: {error:?}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(&host_file).unwrap(),
        "host-only-value"
    );
}
