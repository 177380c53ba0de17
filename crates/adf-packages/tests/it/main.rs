//! adf-packages against a local npm registry (adf-testkit's, on 127.0.0.1): `npm_install`
//! through the tool pipeline into a real store, the agent's lambda importing the packages
//! through the QuickJS resolver (ESM, CommonJS with a dependency, `exports` conditions, JSON),
//! the packages surviving a reopen of the file with the registry gone, and the refusals
//! (native addons, size, integrity, `../` paths, the package count).

#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(unreachable_pub, missing_docs)]

use std::path::PathBuf;
use std::sync::Arc;

use adf_packages::PackageStore;
use adf_runtime::code::{self, Authorization, CodeEnv, CodeRun, LambdaRef, RunOptions};
use adf_runtime::tools::approval::DenyAll;
use adf_runtime::tools::{CallOutcome, ToolCaller, ToolRegistry};
use adf_store::{AdfFile, Caller, ConfigAction, CreateOptions, FileWrite};
use adf_testkit::npm::{NpmPackage, NpmRegistry};
use serde_json::{Value, json};

struct World {
    dir: tempfile::TempDir,
}

impl World {
    fn new(registry: &NpmRegistry) -> World {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("home")).unwrap();
        std::fs::write(
            dir.path().join("home/settings.json"),
            json!({ "npmRegistry": registry.url() }).to_string(),
        )
        .unwrap();
        World { dir }
    }

    fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    /// A fresh store value over the same directory (nothing cached), as a new process has.
    fn registry(&self) -> ToolRegistry {
        let mut registry = ToolRegistry::with_builtins();
        adf_packages::attach(&mut registry, PackageStore::for_home(&self.home()));
        registry
    }

    fn agent_path(&self) -> PathBuf {
        self.dir.path().join("agent.adf")
    }

    /// The agent with both package tools enabled by the owner, as `adf config set` does.
    fn agent(&self) -> AdfFile {
        let mut file = AdfFile::create(self.agent_path(), &CreateOptions::default()).unwrap();
        for tool in ["npm_install", "npm_uninstall"] {
            for flag in ["enabled", "visible"] {
                file.config_set_path(
                    Caller::Owner,
                    &format!("tools.{tool}.{flag}"),
                    ConfigAction::Set,
                    json!(true),
                )
                .unwrap();
            }
        }
        file
    }
}

fn call(registry: &ToolRegistry, file: &mut AdfFile, name: &str, args: Value) -> Value {
    let caller = ToolCaller::Model {
        loop_name: "main".into(),
    };
    match registry.call(file, &caller, name, args, &DenyAll).unwrap() {
        CallOutcome::Done(value) => value,
        _ => panic!("{name} did not finish in the call"),
    }
}

fn packages(file: &AdfFile) -> Value {
    file.config()
        .unwrap()
        .pointer("/code_execution/packages")
        .cloned()
        .unwrap_or(json!([]))
}

fn put(file: &mut AdfFile, path: &str, source: &str) {
    file.file_write(
        Caller::Owner,
        path,
        source.as_bytes(),
        &FileWrite::default(),
    )
    .unwrap();
}

async fn run(registry: ToolRegistry, file: &mut AdfFile, source: &str) -> CodeRun {
    let env = CodeEnv::with_registry(Arc::new(registry)).await.unwrap();
    code::run_lambda(
        file,
        &env,
        &LambdaRef::parse(source).unwrap(),
        json!({}),
        Authorization::SourceFile,
        &DenyAll,
        &RunOptions::default(),
    )
    .await
}

fn value(run: CodeRun) -> Value {
    match run.result {
        Ok(v) => v,
        Err(e) => panic!("the lambda failed: {e}; console: {:?}", run.logs),
    }
}

/// An ES module package (`type: module`, an `exports` map with `import`/`require`
/// conditions, a JSON import) and a CommonJS package with a dependency published at three
/// versions (the range picks 1.2.0).
fn publish_usable(registry: &NpmRegistry) {
    registry.publish(
        NpmPackage::new("esm-greet", "1.0.0")
            .manifest("type", json!("module"))
            .manifest(
                "exports",
                json!({ ".": { "import": "./esm/index.js", "require": "./cjs/index.cjs" } }),
            )
            .file(
                "esm/index.js",
                "import words from './words.json';\nexport default function greet(who) { return `${words.hello}, ${who}`; }\nexport const flavour = 'esm';\n",
            )
            .file("esm/words.json", r#"{ "hello": "Hello" }"#)
            .file("cjs/index.cjs", "exports.flavour = 'cjs';\n"),
    );
    for (version, body) in [
        ("1.0.0", "module.exports = () => 'old';"),
        (
            "1.2.0",
            "module.exports = function repeat(s, n) { let out = ''; for (let i = 0; i < n; i++) out += s; return out; };",
        ),
        ("2.0.0", "module.exports = () => 'too new';"),
    ] {
        registry.publish(NpmPackage::new("tiny-repeat", version).file("index.js", body));
    }
    registry.publish(
        NpmPackage::new("cjs-pad", "2.1.0")
            .dependency("tiny-repeat", "^1.0.0")
            .manifest("main", json!("lib/pad"))
            .file(
                "lib/pad.js",
                "'use strict';\nconst repeat = require('tiny-repeat');\nconst meta = require('../package.json');\nexports.pad = function (s, n) { return repeat(' ', n - String(s).length) + s; };\nexports.version = meta.version;\n",
            ),
    );
}

const USE_PACKAGES: &str = r#"
import greet, { flavour } from "esm-greet";
import padModule, { pad } from "cjs-pad";
export async function main() {
  const dynamic = await import("esm-greet");
  return {
    greeting: greet("agent"),
    flavour,
    padded: pad("7", 3),
    version: padModule.version,
    same: dynamic.default === greet,
  };
}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tol_33_a_lambda_imports_installed_esm_and_cjs_packages_and_they_survive_a_reload() {
    let npm = NpmRegistry::start().await;
    publish_usable(&npm);
    let world = World::new(&npm);
    let mut file = world.agent();
    let registry = world.registry();

    let installed = call(
        &registry,
        &mut file,
        "npm_install",
        json!({ "name": "esm-greet" }),
    );
    assert_eq!(installed["success"], true, "{installed}");
    assert_eq!(installed["version"], "1.0.0");
    assert!(installed["size_mb"].is_number(), "{installed}");
    let installed = call(
        &registry,
        &mut file,
        "npm_install",
        json!({ "name": "cjs-pad", "version": "^2.0.0" }),
    );
    assert_eq!(installed["success"], true, "{installed}");
    assert_eq!(installed["version"], "2.1.0");
    assert_eq!(
        packages(&file),
        json!([
            { "name": "esm-greet", "version": "1.0.0" },
            { "name": "cjs-pad", "version": "2.1.0" }
        ])
    );
    // The dependency is in the store at the version its range picks, but not the agent's.
    assert!(
        PackageStore::for_home(&world.home())
            .record("tiny-repeat@1.2.0")
            .is_some()
    );

    let again = call(
        &registry,
        &mut file,
        "npm_install",
        json!({ "name": "esm-greet" }),
    );
    assert_eq!(again["already_installed"], true, "{again}");

    put(&mut file, "lib/use.ts", USE_PACKAGES);
    let expected = json!({
        "greeting": "Hello, agent",
        "flavour": "esm",
        "padded": "  7",
        "version": "2.1.0",
        "same": true,
    });
    assert_eq!(
        value(run(registry, &mut file, "lib/use.ts").await),
        expected
    );

    // Reopened with a fresh runtime and no registry at all: the store and the file's list
    // are all it needs.
    file.close().unwrap();
    drop(npm);
    let mut file = AdfFile::open(world.agent_path()).unwrap();
    assert_eq!(
        value(run(world.registry(), &mut file, "lib/use.ts").await),
        expected
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tol_33_npm_uninstall_then_the_import_fails_clearly() {
    let npm = NpmRegistry::start().await;
    publish_usable(&npm);
    let world = World::new(&npm);
    let mut file = world.agent();
    let registry = world.registry();
    let installed = call(
        &registry,
        &mut file,
        "npm_install",
        json!({ "name": "esm-greet" }),
    );
    assert_eq!(installed["success"], true, "{installed}");
    put(
        &mut file,
        "lib/a.ts",
        "import greet from 'esm-greet';\nexport function main() { return greet('x'); }\n",
    );
    assert_eq!(
        value(run(world.registry(), &mut file, "lib/a.ts").await),
        json!("Hello, x")
    );

    let removed = call(
        &registry,
        &mut file,
        "npm_uninstall",
        json!({ "name": "esm-greet" }),
    );
    assert_eq!(removed["success"], true, "{removed}");
    assert_eq!(packages(&file), json!([]));
    let failed = run(world.registry(), &mut file, "lib/a.ts").await;
    let error = failed.result.expect_err("the import must fail").to_string();
    assert!(
        error.contains("esm-greet") && error.contains("not installed"),
        "{error}"
    );
    // The shared store keeps the files (other agents may use them).
    assert!(
        PackageStore::for_home(&world.home())
            .record("esm-greet@1.0.0")
            .is_some()
    );
}

/// Installs `name` and answers the result; the agent's packages must stay empty.
async fn refused(npm: &NpmRegistry, name: &str) -> Value {
    let world = World::new(npm);
    let mut file = world.agent();
    let result = call(
        &world.registry(),
        &mut file,
        "npm_install",
        json!({ "name": name }),
    );
    assert_eq!(result["success"], false, "{result}");
    assert_eq!(
        packages(&file),
        json!([]),
        "a refused install records nothing"
    );
    assert!(
        std::fs::read_dir(world.home().join("packages/ids"))
            .map(|d| d.count())
            .unwrap_or(0)
            == 0,
        "a refused install leaves no record"
    );
    result
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tol_31_native_addons_are_refused() {
    let npm = NpmRegistry::start().await;
    npm.publish(
        NpmPackage::new("gyp-addon", "1.0.0")
            .manifest("gypfile", json!(true))
            .file(
                "index.js",
                "module.exports = require('./build/Release/a.node');",
            ),
    );
    npm.publish(
        NpmPackage::new("shipped-binary", "1.0.0")
            .file("index.js", "module.exports = 1;")
            .file(
                "prebuilds/linux-x64/addon.node",
                vec![0x7f, b'E', b'L', b'F'],
            ),
    );
    npm.publish(
        NpmPackage::new("has-binding-gyp", "1.0.0")
            .file("index.js", "module.exports = 1;")
            .file("binding.gyp", "{ 'targets': [] }"),
    );
    npm.publish(
        NpmPackage::new("builds-on-install", "1.0.0")
            .manifest("scripts", json!({ "install": "node-gyp rebuild" }))
            .file("index.js", "module.exports = 1;"),
    );
    npm.publish(
        NpmPackage::new("pure-but-depends", "1.0.0")
            .dependency("gyp-addon", "^1.0.0")
            .file("index.js", "module.exports = require('gyp-addon');"),
    );
    for name in [
        "gyp-addon",
        "shipped-binary",
        "has-binding-gyp",
        "builds-on-install",
        "pure-but-depends",
    ] {
        let result = refused(&npm, name).await;
        assert_eq!(result["error"], "native_addon", "{name}: {result}");
        assert!(result["message"].as_str().unwrap().len() > 10, "{result}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tol_32_a_package_over_the_size_limit_is_refused() {
    let npm = NpmRegistry::start().await;
    let big = vec![0u8; 51 * 1024 * 1024];
    // Measured while unpacking (no unpackedSize declared) and declared up front.
    npm.publish(
        NpmPackage::new("huge-undeclared", "1.0.0")
            .file("data.bin", big.clone())
            .without_unpacked_size(),
    );
    npm.publish(NpmPackage::new("huge-declared", "1.0.0").file("data.bin", big));
    for name in ["huge-undeclared", "huge-declared"] {
        let result = refused(&npm, name).await;
        assert_eq!(result["error"], "size_limit", "{name}: {result}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tol_32_the_fifty_first_package_is_refused() {
    let npm = NpmRegistry::start().await;
    publish_usable(&npm);
    let world = World::new(&npm);
    let mut file = world.agent();
    let fifty: Vec<Value> = (0..50)
        .map(|i| json!({ "name": format!("p{i}"), "version": "1.0.0" }))
        .collect();
    file.config_set_path(
        Caller::Owner,
        "code_execution.packages",
        ConfigAction::Set,
        json!(fifty),
    )
    .unwrap();
    let result = call(
        &world.registry(),
        &mut file,
        "npm_install",
        json!({ "name": "esm-greet" }),
    );
    assert_eq!(result["error"], "size_limit", "{result}");
    assert_eq!(packages(&file).as_array().unwrap().len(), 50);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_integrity_mismatch_is_refused() {
    let npm = NpmRegistry::start().await;
    npm.publish(
        NpmPackage::new("tampered", "1.0.0")
            .file("index.js", "module.exports = 1;")
            .wrong_integrity(),
    );
    let result = refused(&npm, "tampered").await;
    assert_eq!(result["error"], "integrity", "{result}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tarball_with_parent_paths_is_refused() {
    let npm = NpmRegistry::start().await;
    npm.publish(
        NpmPackage::new("climber", "1.0.0")
            .file("index.js", "module.exports = 1;")
            .raw_entry("package/../../../escaped.js", "pwned"),
    );
    let world = World::new(&npm);
    let mut file = world.agent();
    let result = call(
        &world.registry(),
        &mut file,
        "npm_install",
        json!({ "name": "climber" }),
    );
    assert_eq!(result["success"], false, "{result}");
    assert_eq!(result["error"], "unsafe_path", "{result}");
    for escaped in [
        world.dir.path().join("escaped.js"),
        world.home().join("escaped.js"),
        world.home().join("packages/escaped.js"),
    ] {
        assert!(!escaped.exists(), "{} was written", escaped.display());
    }
    assert_eq!(packages(&file), json!([]));
}
