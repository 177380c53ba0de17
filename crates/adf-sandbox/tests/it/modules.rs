use crate::common;

use adf_sandbox::SandboxError;
use common::*;
use serde_json::json;

fn files() -> std::sync::Arc<TestHost> {
    TestHost::new(&[
        (
            "lib/report.ts",
            "import { fmt } from './util.ts';\nimport { twice } from '../shared/x.js';\nimport def from './util';\nexport async function main({ n }: { n: number }) { return fmt(twice(n)) + def; }\nexport function other() { return 'other'; }\n",
        ),
        (
            "lib/util.ts",
            "export const fmt = (n: number): string => `n=${n}`;\nexport default '!';\n",
        ),
        ("shared/x.js", "export * from './y.js';\n"),
        (
            "shared/y.ts",
            "export function twice(n: number) { return n * 2; }\n",
        ),
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cod_13_lambda_imports_siblings_relative_to_importer() {
    let sb = sandbox().await;
    let host = files();
    let out = sb
        .run(lambda("lib/report.ts", json!({"n": 4})), host.clone())
        .await
        .unwrap();
    assert_eq!(out.value, json!("n=8!"));
    // `path:function` names another export; the default is `main`.
    let out = sb
        .run(lambda("lib/report.ts:other", json!({})), host)
        .await
        .unwrap();
    assert_eq!(out.value, json!("other"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_static_import_is_a_module_error() {
    let sb = sandbox().await;
    let host = TestHost::new(&[(
        "a.js",
        "import { x } from './nope.js';\nexport function main() { return x; }\n",
    )]);
    match sb.run(lambda("a.js", json!({})), host).await.unwrap_err() {
        SandboxError::Module { path, message } => {
            assert_eq!(path, "nope.js");
            assert!(message.contains("a.js"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_lambda_file_and_function() {
    let sb = sandbox().await;
    let host = files();
    assert!(matches!(
        sb.run(lambda("lib/none.ts", json!({})), host.clone())
            .await
            .unwrap_err(),
        SandboxError::Module { .. }
    ));
    assert!(matches!(
        sb.run(lambda("lib/report.ts:nothing", json!({})), host.clone())
            .await
            .unwrap_err(),
        SandboxError::NotAFunction { .. }
    ));
    assert!(matches!(
        sb.run(lambda("lib/util.ts:fmt2", json!({})), host)
            .await
            .unwrap_err(),
        SandboxError::NotAFunction { .. }
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paths_cannot_leave_the_agent_files() {
    let sb = sandbox().await;
    let host = TestHost::new(&[(
        "a.js",
        "import x from '../../etc/passwd';\nexport function main() { return x; }\n",
    )]);
    assert!(matches!(
        sb.run(lambda("a.js", json!({})), host).await.unwrap_err(),
        SandboxError::Module { .. }
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inline_code_can_import_agent_files() {
    let sb = sandbox().await;
    let host = files();
    let out = sb
        .run(inline("import { fmt } from './lib/util.ts';\nconst m = await import('./shared/y.ts');\nreturn fmt(m.twice(5));"), host)
        .await
        .unwrap();
    assert_eq!(out.value, json!("n=10"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changed_module_is_reloaded() {
    let sb = sandbox().await;
    let host = TestHost::new(&[("a.js", "export function main() { return 1; }\n")]);
    assert_eq!(
        sb.run(lambda("a.js", json!({})).warm(true), host.clone())
            .await
            .unwrap()
            .value,
        json!(1)
    );
    host.put("a.js", "export function main() { return 2; }\n");
    assert_eq!(
        sb.run(lambda("a.js", json!({})).warm(true), host.clone())
            .await
            .unwrap()
            .value,
        json!(2)
    );
    assert_eq!(
        sb.run(lambda("a.js", json!({})), host).await.unwrap().value,
        json!(2)
    );
}
