use crate::common;

use adf_sandbox::{Entry, Request, SandboxError};
use common::*;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ts_enum_interface_satisfies_and_annotations_are_stripped() {
    let sb = sandbox().await;
    let host = TestHost::new(&[(
        "lib/calc.ts",
        r#"
import type { Ignored } from './types.ts';
interface Input { a: number; b: number }
type Pair = [number, number];
enum Op { Add = 1, Mul = 2 }
const enum Flag { On = 'on' }
abstract class Base<T> { abstract run(x: T): number }
class Calc extends Base<Input> { private k: number = 1; run(x: Input): number { return (x.a + x.b) * this.k; } }
const cfg = { scale: 10 } satisfies { scale: number };
export async function main(input: Input): Promise<{ sum: number; op: Op; flag: string; pair: Pair }> {
  const v = new Calc().run(input)!;
  const p = [input.a, input.b] as Pair;
  return { sum: v * cfg.scale, op: Op.Mul, flag: Flag.On, pair: p };
}
"#,
    )]);
    let out = sb
        .run(lambda("lib/calc.ts", json!({"a": 2, "b": 3})), host)
        .await
        .unwrap();
    assert_eq!(
        out.value,
        json!({"sum": 50, "op": 2, "flag": "on", "pair": [2, 3]})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ts_inline_code_is_stripped_when_asked() {
    let sb = sandbox().await;
    let host = TestHost::new(&[]);
    let req = Request::new(Entry::Inline {
        code: "enum E { A = 3 }\nconst x: number = E.A;\nreturn x satisfies number;".into(),
        typescript: true,
    });
    assert_eq!(sb.run(req, host).await.unwrap().value, json!(3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ts_syntax_errors_name_file_line_and_column() {
    let sb = sandbox().await;
    let host = TestHost::new(&[(
        "lib/bad.ts",
        "export function main() {\n  const x: number = ;\n}\n",
    )]);
    let err = sb
        .run(lambda("lib/bad.ts", json!({})), host)
        .await
        .unwrap_err();
    match err {
        SandboxError::Syntax { message } => {
            assert!(message.starts_with("lib/bad.ts:2:"), "{message}")
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn js_syntax_errors_are_syntax_errors() {
    let sb = sandbox().await;
    let host = TestHost::new(&[("a.js", "export function main() { return }}\n")]);
    let err = sb
        .run(lambda("a.js", json!({})), host.clone())
        .await
        .unwrap_err();
    assert!(matches!(err, SandboxError::Syntax { .. }), "{err:?}");
    let err = sb.run(inline("return (;"), host).await.unwrap_err();
    assert!(matches!(err, SandboxError::Syntax { .. }), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_js_passes_through() {
    let sb = sandbox().await;
    let host = TestHost::new(&[("lib/a.mjs", "export const main = ({ n }) => n * 2;\n")]);
    assert_eq!(
        sb.run(lambda("lib/a.mjs", json!({"n": 21})), host)
            .await
            .unwrap()
            .value,
        json!(42)
    );
}
