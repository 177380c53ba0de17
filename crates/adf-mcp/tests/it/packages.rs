//! Real servers from the registries, installed through `Manager::add` into the runtime's
//! package cache: `@modelcontextprotocol/server-memory` (npm) and `mcp-server-time` (PyPI).

use adf_mcp::install::{InstallRequest, Kind};
use adf_runtime::tools::approval::ApproveAll;
use serde_json::json;

use crate::common::*;

#[test]
fn npm_server_memory_installs_into_the_cache_and_its_tools_work_through_the_pipeline() {
    let runtime = runtime();
    runtime.block_on(async {
        let world = World::new();
        let mut file = world.agent("mem");
        let request = InstallRequest {
            kind: Kind::Npm,
            package: Some("@modelcontextprotocol/server-memory".into()),
            ..InstallRequest::default()
        };
        let (name, report) = world.manager().add(&mut file, &request).await.unwrap();
        assert_eq!(name, "memory");
        assert!(report.added.contains(&"mcp_memory_create_entities".to_owned()), "{report:?}");
        assert!(world.home.dir().join("mcp/npm").is_dir(), "the package lives in the runtime's cache");
        let server = &file.config().unwrap()["mcp"]["servers"][0];
        assert_eq!(server["source"], json!("npm:@modelcontextprotocol/server-memory"));
        let registry = world.registry();
        // A model call of a new tool asks the owner first.
        let created = call(
            &registry,
            &mut file,
            &model(),
            "mcp_memory_create_entities",
            json!({"entities": [{"name": "adf", "entityType": "project", "observations": ["one file per agent"]}]}),
            &ApproveAll,
        )
        .await
        .unwrap();
        assert!(created.to_string().contains("adf"), "{created}");
        let graph = owner_call(&registry, &mut file, "mcp_memory_read_graph", json!({}))
            .await
            .unwrap();
        assert!(graph.to_string().contains("one file per agent"), "{graph}");
    });
}

#[test]
fn pypi_mcp_server_time_installs_into_its_own_virtualenv_and_answers() {
    let runtime = runtime();
    runtime.block_on(async {
        let world = World::new();
        let mut file = world.agent("time");
        let request = InstallRequest {
            kind: Kind::Pypi,
            package: Some("mcp-server-time".into()),
            args: vec!["--local-timezone".into(), "UTC".into()],
            ..InstallRequest::default()
        };
        let (name, report) = world.manager().add(&mut file, &request).await.unwrap();
        assert_eq!(name, "time");
        assert!(
            report
                .added
                .contains(&"mcp_time_get_current_time".to_owned()),
            "{report:?}"
        );
        assert!(
            world
                .home
                .dir()
                .join("mcp/pypi/mcp-server-time/bin/python")
                .exists()
        );
        let registry = world.registry();
        let now = owner_call(
            &registry,
            &mut file,
            "mcp_time_get_current_time",
            json!({"timezone": "UTC"}),
        )
        .await
        .unwrap();
        assert!(now.to_string().contains("UTC"), "{now}");
    });
}
