//! Middleware (§12.3) at the inbox and outbox points, through the real pipelines: ingress
//! (`receive::accept`, as the daemon's guest connection runs it) and `msg_send`'s prepare
//! (the pipeline's deferred call, stopped before delivery). The fetch point is in fetch.rs
//! (SRV-30); daemon-level HTTP answers and signatures are in adf-server's messaging tests.
use crate::common;

use adf_runtime::messaging::Origin;
use adf_runtime::messaging::receive::{self, Arrival, Refusal};
use adf_runtime::messaging::send::Prepared;
use adf_runtime::tools::approval::DenyAll;
use adf_runtime::tools::{CallOutcome, ErrorCode, ToolError, ToolRegistry};
use adf_store::messages::{Mailbox, MessageFilter};
use adf_store::{AdfFile, FileWrite};
use common::{model, new_agent, owner_set};
use serde_json::{Map, Value, json};

/// Stores an agent file as the owner, authorized or not.
fn put(file: &mut AdfFile, path: &str, source: &str, authorized: bool) {
    file.file_write(
        adf_store::Caller::Owner,
        path,
        source.as_bytes(),
        &FileWrite::default(),
    )
    .unwrap();
    file.file_set_authorized(adf_store::Caller::Owner, path, authorized)
        .unwrap();
}

/// Middleware that records what it saw under `seen/<name>.json`, then appends `[<name>]` to the
/// message content (inbox: `data.payload.content`; outbox: `data.message.payload.content`) and
/// adds its name to `meta.chain`.
fn appender(name: &str) -> String {
    format!(
        r#"
export async function main(input) {{
  await adf.fs_write({{ path: 'seen/{name}.json', content: JSON.stringify(input), mode: 'write' }})
  const data = input.data
  const payload = input.point === 'outbox' ? data.message.payload : data.payload
  payload.content = payload.content + ' [{name}]'
  const chain = (input.meta.chain || []).concat(['{name}'])
  return {{ data, meta: {{ ...input.meta, chain }} }}
}}
"#
    )
}

const REJECT_451: &str = r#"
export async function main(input) {
  return { reject: { code: 451, reason: 'not from ' + input.data.from } }
}
"#;

const MARKS_RUN: &str = r#"
export async function main(input) {
  await adf.fs_write({ path: 'ran/marker.txt', content: 'ran', mode: 'write' })
}
"#;

fn seen(file: &AdfFile, name: &str) -> Option<Value> {
    file.file_read(&format!("seen/{name}.json"))
        .unwrap()
        .map(|entry| serde_json::from_slice(&entry.content).unwrap())
}

fn handle(file: &AdfFile) -> String {
    file.config().unwrap()["handle"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// An unsigned ALF message to this (identity-less) agent, addressed by its handle.
fn message_to(file: &AdfFile, content: &str) -> Value {
    json!({
        "version": "1.0", "network": "devnet",
        "id": adf_store::defaults::random_id(20),
        "timestamp": adf_store::time::now_iso(),
        "from": "did:key:z6MkSender", "to": handle(file),
        "payload": { "meta": {}, "content_type": "text/plain", "content": content,
                     "sent_at": adf_store::time::now_iso() }
    })
}

fn deliver(file: &mut AdfFile, message: &Value) -> Result<receive::Accepted, Refusal> {
    let wire = message.to_string();
    receive::accept(
        file,
        &Arrival {
            wire: wire.as_bytes(),
            origin: Origin::Loopback,
            transport: "http",
            return_path: None,
        },
        None,
    )
}

fn deliver_text(file: &mut AdfFile, content: &str) -> Result<receive::Accepted, Refusal> {
    let message = message_to(file, content);
    deliver(file, &message)
}

fn contents(file: &AdfFile, mailbox: Mailbox) -> Vec<String> {
    file.messages(mailbox, &MessageFilter::default(), None)
        .unwrap()
        .iter()
        .map(|row| row["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// `(event, target)` of every `middleware` log row, oldest first.
fn middleware_logs(file: &AdfFile) -> Vec<(String, String)> {
    let logs = adf_store::test_support::tables(file).logs().unwrap();
    logs.into_iter()
        .filter(|l| l.origin.as_deref() == Some("middleware"))
        .map(|l| (l.event.unwrap(), l.target.unwrap()))
        .collect()
}

#[test]
fn srv_15_srv_17_srv_18_inbox_middleware_runs_in_order_and_its_changes_are_stored() {
    let (_d, _p, mut file) = new_agent();
    put(&mut file, "lib/first.ts", &appender("first"), true);
    put(&mut file, "lib/second.ts", &appender("second"), true);
    owner_set(
        &mut file,
        "security.middleware.inbox",
        json!([{ "lambda": "lib/first.ts:main" }, { "lambda": "lib/second.ts:main" }]),
    );
    let message = message_to(&file, "hello");
    let accepted = deliver(&mut file, &message).unwrap();
    assert!(!accepted.duplicate);

    // SRV-17: the stored message is the one the chain let through.
    assert_eq!(contents(&file, Mailbox::Inbox), ["hello [first] [second]"]);
    // SRV-18: the inbox point's data is the ALF message before storage; meta carries the
    // runtime's stamps and the transport.
    let first = seen(&file, "first").unwrap();
    assert_eq!(first["point"], "inbox");
    assert_eq!(first["data"]["id"], message["id"]);
    assert_eq!(first["data"]["payload"]["content"], "hello");
    assert_eq!(first["meta"]["transport"], "http");
    assert_eq!(first["meta"]["message_verified"], false);
    // SRV-15: array order; each output's data and meta are the next one's input.
    let second = seen(&file, "second").unwrap();
    assert_eq!(second["data"]["payload"]["content"], "hello [first]");
    assert_eq!(second["meta"]["chain"], json!(["first"]));
}

#[test]
fn srv_15_an_inbox_rejection_stops_the_chain_answers_its_code_and_stores_nothing() {
    let (_d, _p, mut file) = new_agent();
    put(&mut file, "lib/gate.ts", REJECT_451, true);
    put(&mut file, "lib/after.ts", MARKS_RUN, true);
    owner_set(
        &mut file,
        "security.middleware.inbox",
        json!([{ "lambda": "lib/gate.ts:main" }, { "lambda": "lib/after.ts:main" }]),
    );
    let refusal = deliver_text(&mut file, "spam").unwrap_err();
    assert_eq!(refusal.status, 451);
    assert_eq!(refusal.reason, "not from did:key:z6MkSender");
    assert!(contents(&file, Mailbox::Inbox).is_empty());
    assert!(
        file.file_read("ran/marker.txt").unwrap().is_none(),
        "the second middleware never ran"
    );
    assert_eq!(
        middleware_logs(&file),
        [(
            "middleware_rejected".to_owned(),
            "lib/gate.ts:main".to_owned()
        )]
    );
}

#[test]
fn srv_16_unauthorized_middleware_is_skipped_and_logged_unless_authorization_is_not_required() {
    let (_d, _p, mut file) = new_agent();
    put(&mut file, "lib/gate.ts", REJECT_451, false);
    put(&mut file, "lib/mark.ts", &appender("mark"), true);
    owner_set(
        &mut file,
        "security.middleware.inbox",
        json!([{ "lambda": "lib/gate.ts:main" }, { "lambda": "lib/mark.ts:main" }]),
    );
    // Default (absent) require_middleware_authorization: the unauthorized gate is skipped.
    deliver_text(&mut file, "one").unwrap();
    assert_eq!(contents(&file, Mailbox::Inbox), ["one [mark]"]);
    assert_eq!(
        middleware_logs(&file),
        [(
            "middleware_skipped".to_owned(),
            "lib/gate.ts:main".to_owned()
        )]
    );

    // With it false, the unauthorized file runs (and rejects).
    owner_set(
        &mut file,
        "security.require_middleware_authorization",
        json!(false),
    );
    let refusal = deliver_text(&mut file, "two").unwrap_err();
    assert_eq!(refusal.status, 451);
    assert_eq!(contents(&file, Mailbox::Inbox), ["one [mark]"]);
}

#[test]
fn srv_17_broken_inbox_middleware_fails_closed() {
    let cases: [(&str, Value, &str); 5] = [
        (
            "throws",
            json!([{ "lambda": "lib/bad.ts:throws" }]),
            "the lambda failed",
        ),
        (
            "a number",
            json!([{ "lambda": "lib/bad.ts:number" }]),
            "returned a number",
        ),
        (
            "a malformed reject",
            json!([{ "lambda": "lib/bad.ts:badReject" }]),
            "reject.code",
        ),
        (
            "a missing file",
            json!([{ "lambda": "lib/missing.ts:main" }]),
            "no file lib/missing.ts",
        ),
        (
            "a malformed reference",
            json!([42]),
            "a middleware reference",
        ),
    ];
    for (what, refs, logged) in cases {
        let (_d, _p, mut file) = new_agent();
        put(
            &mut file,
            "lib/bad.ts",
            r#"
export async function throws() { throw new Error('boom') }
export async function number() { return 42 }
export async function badReject() { return { reject: { code: 'no', reason: 'x' } } }
"#,
            true,
        );
        owner_set(&mut file, "security.middleware.inbox", refs);
        let refusal = deliver_text(&mut file, "x").expect_err(what);
        assert_eq!(refusal.status, 500, "{what}");
        assert!(contents(&file, Mailbox::Inbox).is_empty(), "{what}");
        let logs = adf_store::test_support::tables(&file).logs().unwrap();
        let message = logs
            .into_iter()
            .find(|l| {
                l.origin.as_deref() == Some("middleware")
                    && l.event.as_deref() == Some("middleware_failed")
            })
            .unwrap()
            .message;
        assert!(message.contains(logged), "{what}: {message}");
    }
}

#[test]
fn an_inbox_middleware_that_returns_nothing_passes_the_message_through() {
    let (_d, _p, mut file) = new_agent();
    put(&mut file, "lib/noop.ts", MARKS_RUN, true);
    owner_set(
        &mut file,
        "security.middleware.inbox",
        json!([{ "lambda": "lib/noop.ts:main" }]),
    );
    deliver_text(&mut file, "as is").unwrap();
    assert_eq!(contents(&file, Mailbox::Inbox), ["as is"]);
    assert!(file.file_read("ran/marker.txt").unwrap().is_some());
}

/// `msg_send` through the pipeline as the model, to an HTTP inbox on the discard port of
/// loopback; the call is stopped at its deferred half, so nothing is delivered.
fn send(file: &mut AdfFile, content: &str) -> Result<Prepared, ToolError> {
    let args = json!({
        "recipient": "did:key:z6MkReceiver",
        "address": "http://127.0.0.1:9/agents/r/inbox",
        "content": content,
    });
    match ToolRegistry::with_builtins().call(file, &model(), "msg_send", args, &DenyAll)? {
        CallOutcome::Deferred(call) => Ok(serde_json::from_value(call.args).unwrap()),
        other => panic!("msg_send must be deferred, got {other:?}"),
    }
}

fn unsigned_sender() -> (tempfile::TempDir, std::path::PathBuf, AdfFile) {
    let (d, p, mut file) = new_agent();
    // No identity in these files: level 0 sends unsigned (signing is the daemon tests' part).
    owner_set(&mut file, "security.level", json!(0));
    owner_set(&mut file, "messaging.inbox_mode", json!(false));
    (d, p, file)
}

#[test]
fn srv_17_srv_18_outbox_middleware_sees_the_egress_context_and_changes_what_is_sent_and_stored() {
    let (_d, _p, mut file) = unsigned_sender();
    put(&mut file, "lib/out.ts", &appender("out"), true);
    owner_set(
        &mut file,
        "security.middleware.outbox",
        json!([{ "lambda": "lib/out.ts:main" }]),
    );
    let prepared = send(&mut file, "report").unwrap();
    assert_eq!(prepared.message["payload"]["content"], "report [out]");
    assert_eq!(contents(&file, Mailbox::Outbox), ["report [out]"]);

    let input = seen(&file, "out").unwrap();
    assert_eq!(input["point"], "outbox");
    assert_eq!(input["data"]["message"]["to"], "did:key:z6MkReceiver");
    assert_eq!(input["data"]["message"]["payload"]["content"], "report");
    assert_eq!(
        input["data"]["transport"],
        json!({ "address": "http://127.0.0.1:9/agents/r/inbox", "method": "http" })
    );
    assert_eq!(input["data"]["agent"]["did"], prepared.message["from"]);
    assert_eq!(input["meta"], json!({}));
}

#[test]
fn srv_15_an_outbox_rejection_fails_msg_send_and_stores_no_row() {
    let (_d, _p, mut file) = unsigned_sender();
    put(
        &mut file,
        "lib/out.ts",
        r#"
export async function main(input) {
  return { reject: { code: 403, reason: 'no sending to ' + input.data.message.to } }
}
export async function retarget(input) {
  input.data.message.to = 'did:key:z6MkSomeoneElse'
  return { data: input.data }
}
"#,
        true,
    );
    owner_set(
        &mut file,
        "security.middleware.outbox",
        json!([{ "lambda": "lib/out.ts:main" }]),
    );
    let error = send(&mut file, "report").unwrap_err();
    assert_eq!(error.code, ErrorCode::ToolError);
    assert!(
        error.message.contains("no sending to did:key:z6MkReceiver"),
        "{error}"
    );
    assert!(contents(&file, Mailbox::Outbox).is_empty());

    // Changing the recipient would bypass the route already chosen: refused.
    owner_set(
        &mut file,
        "security.middleware.outbox",
        json!([{ "lambda": "lib/out.ts:retarget" }]),
    );
    let error = send(&mut file, "report").unwrap_err();
    assert!(error.message.contains("`to`"), "{error}");
    assert!(contents(&file, Mailbox::Outbox).is_empty());
}

/// The one audit snapshot of `source` (`inbox_message` / `outbox_message`), decompressed.
fn message_snapshot(file: &AdfFile, source: &str) -> Value {
    let rows: Vec<_> = file
        .audit_list()
        .unwrap()
        .into_iter()
        .filter(|a| a.source == source)
        .collect();
    assert_eq!(rows.len(), 1, "one {source} snapshot: {rows:?}");
    file.audit_data(rows[0].id).unwrap()
}

#[test]
fn aud_25_msg_42_message_audits_hold_the_whole_alf_message_and_inline_attachments_are_imported() {
    use base64::Engine as _;
    let encode = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    // Arrival: the stored row points at the imported file; the snapshot keeps the inline data.
    let (_d, _p, mut file) = new_agent();
    owner_set(&mut file, "context.audit.inbox", json!(true));
    let sent_bytes = b"quarterly numbers\x00\xff";
    let mut message = message_to(&file, "see attached");
    message["payload"]["attachments"] = json!([{
        "filename": "q3.bin", "content_type": "application/octet-stream",
        "transfer": "inline", "data": encode(sent_bytes),
    }]);
    deliver(&mut file, &message).unwrap();
    let row = &file
        .messages(Mailbox::Inbox, &MessageFilter::default(), None)
        .unwrap()[0];
    let stored: Value = serde_json::from_str(row["attachments"].as_str().unwrap()).unwrap();
    assert_eq!(stored[0]["transfer"], "imported", "{stored}");
    assert!(stored[0].get("data").is_none(), "{stored}");
    let imported = stored[0]["path"].as_str().unwrap();
    // MSG-42: written under imports/{sender}/ (the sender has no alias: its DID's last part).
    assert_eq!(imported, "imports/z6MkSender/q3.bin");
    assert_eq!(
        file.file_read(imported).unwrap().unwrap().content,
        sent_bytes
    );
    let snapshot = message_snapshot(&file, "inbox_message");
    assert_eq!(snapshot["id"], message["id"]);
    assert_eq!(
        snapshot["payload"]["attachments"][0]["data"],
        encode(sent_bytes),
        "{snapshot}"
    );

    // Sending: the outbox row flattens the attachment; the snapshot is the message as sent.
    let (_d, _p, mut file) = unsigned_sender();
    owner_set(&mut file, "context.audit.outbox", json!(true));
    let report = b"the report body";
    file.file_write(
        adf_store::Caller::Owner,
        "report.txt",
        report,
        &FileWrite::default(),
    )
    .unwrap();
    let args = json!({
        "recipient": "did:key:z6MkReceiver",
        "address": "http://127.0.0.1:9/agents/r/inbox",
        "content": "attached",
        "attachments": ["report.txt"],
    });
    let CallOutcome::Deferred(call) = ToolRegistry::with_builtins()
        .call(&mut file, &model(), "msg_send", args, &DenyAll)
        .unwrap()
    else {
        panic!("msg_send must be deferred")
    };
    let prepared: Prepared = serde_json::from_value(call.args).unwrap();
    let outbox = Value::Object(
        file.messages(Mailbox::Outbox, &MessageFilter::default(), None)
            .unwrap()[0]
            .clone(),
    );
    assert!(
        !outbox.to_string().contains(&encode(report)),
        "the outbox row holds no attachment data: {outbox}"
    );
    let snapshot = message_snapshot(&file, "outbox_message");
    assert_eq!(snapshot["id"], prepared.message["id"]);
    let attachment = &snapshot["payload"]["attachments"][0];
    assert_eq!(attachment["data"], encode(report), "{snapshot}");
    assert_eq!(attachment["transfer"], "inline", "{snapshot}");
}

#[test]
fn a_point_without_middleware_runs_nothing() {
    let (_d, _p, mut file) = unsigned_sender();
    let meta = Map::new();
    let outcome = adf_runtime::middleware::run_chain(
        &mut file,
        adf_runtime::middleware::Point::Inbox,
        json!({ "k": 1 }),
        meta,
    )
    .unwrap();
    assert_eq!(outcome.data, json!({ "k": 1 }));
    assert!(outcome.ran.is_empty() && outcome.skipped.is_empty());
    send(&mut file, "plain").unwrap();
    assert_eq!(contents(&file, Mailbox::Outbox), ["plain"]);
}

#[test]
fn middleware_code_cannot_reenter_a_chain_through_its_own_tool_calls() {
    let (_d, _p, mut file) = new_agent();
    put(
        &mut file,
        "lib/mw.ts",
        r#"
export async function inbox(input) {
  try { await adf.sys_fetch({ url: 'http://127.0.0.1:9/' }) }
  catch (e) { return { reject: { code: 409, reason: e.message } } }
  return { reject: { code: 418, reason: 'the fetch went through' } }
}
export async function fetch(input) { return {} }
"#,
        true,
    );
    owner_set(
        &mut file,
        "security.middleware.inbox",
        json!([{ "lambda": "lib/mw.ts:inbox" }]),
    );
    owner_set(
        &mut file,
        "security.fetch_middleware",
        json!([{ "lambda": "lib/mw.ts:fetch" }]),
    );
    let refusal = deliver_text(&mut file, "x").unwrap_err();
    assert_eq!(refusal.status, 409, "{refusal}");
    assert!(
        refusal
            .reason
            .contains("cannot call a tool that runs middleware"),
        "{refusal}"
    );
}
