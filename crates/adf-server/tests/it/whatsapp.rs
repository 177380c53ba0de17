//! The WhatsApp adapter run by the daemon, end to end: Meta's verification GET and signed
//! webhook POSTs reach the running adapter through the daemon's one front door on the public
//! route `/agents/{handle}/adapters/whatsapp/webhook` (no token: the signature is checked
//! first), a message becomes an inbox row, the agent's `on_inbox` lambda answers it with
//! `msg_send` by `parent_id`, the reply reaches the testkit's Graph API server quoting the
//! message, and a form goes out as reply buttons whose press comes back as a threaded answer.
//! The three credentials are sealed in the agent's file for the daemon home's owner.

use std::path::PathBuf;
use std::sync::Arc;

use adf_server::daemon::Agent;
use adf_store::messages::{Mailbox, MessageFilter};
use adf_testkit::whatsapp::{GraphServer, button_reply, sign, text_message, webhook_payload};
use serde_json::{Map, Value, json};

use crate::common::{Harness, agent_file, owner_keys, wait_for};

const TOKEN: &str = "EAAG-daemon-access-token";
const APP_SECRET: &str = "daemon-app-secret";
const VERIFY: &str = "daemon-verify-token";
const PHONE: &str = "106540352242922";
const ANN: &str = "16315551234";
const WEBHOOK: &str = "/agents/wa-bot/adapters/whatsapp/webhook";

/// Answers a message with text, or with a form when its WhatsApp id says `FORM`, both by
/// `parent_id` (the runtime finds the recipient and copies the `source_context`); an id that
/// says `ANSWER` (a form answer) gets no reply. The trigger event carries the row's id and
/// `message_id` (`whatsapp:<wamid>`), not its content.
const REPLIER: &str = r#"
export async function main(event) {
  const wamid = event.data.message_id || '';
  let out;
  try {
    if (wamid.includes('ANSWER')) {
      return;
    } else if (!wamid.includes('FORM')) {
      out = await adf.msg_send({ parent_id: event.data.id, content: 'pong: ' + event.data.id });
    } else {
      out = await adf.msg_send({
        parent_id: event.data.id,
        content_type: 'application/vnd.adf.form+json',
        content: JSON.stringify({ form_id: 'lunch', questions: [
          { id: 'main', text: 'Main course?', options: ['Fish', { id: 'veg', label: 'Vegetables', value: 'v' }] },
        ] }),
      });
    }
  } catch (e) { out = { code: e.code, message: e.message } }
  await adf.fs_write({ path: `replied/${event.data.id}.json`, content: JSON.stringify(out), mode: 'write' });
}
"#;

fn whatsapp_agent(h: &Harness, server: &GraphServer) -> PathBuf {
    let path = agent_file(
        h.dir.path(),
        "wa-bot",
        &[("lib/reply.ts", REPLIER)],
        &[
            ("handle", json!("wa-bot")),
            (
                "adapters",
                json!({ "whatsapp": {
                    "enabled": true,
                    "config": { "api_root": server.api_root(), "phone_number_id": PHONE },
                } }),
            ),
            ("security.allow_local_fetch", json!(true)),
            (
                "triggers",
                json!({ "on_inbox": { "enabled": true, "targets": [
                    { "scope": "system", "lambda": "lib/reply.ts:main" }
                ] } }),
            ),
        ],
    );
    let keys = owner_keys(h);
    let mut file = adf_store::AdfFile::open(&path).unwrap();
    let open = adf_runtime::identity::provision_new(&mut file, &keys).unwrap();
    for (key, value) in [
        ("WHATSAPP_ACCESS_TOKEN", TOKEN),
        ("WHATSAPP_APP_SECRET", APP_SECRET),
        ("WHATSAPP_VERIFY_TOKEN", VERIFY),
    ] {
        let purpose = format!("adapter:whatsapp:{key}");
        adf_runtime::identity::set_credential(&mut file, &open, &purpose, value.as_bytes(), false)
            .unwrap();
    }
    file.close().unwrap();
    path
}

async fn inbox(agent: &Arc<Agent>) -> Vec<Map<String, Value>> {
    agent
        .store()
        .run(|file| file.messages(Mailbox::Inbox, &MessageFilter::default(), None))
        .await
        .unwrap()
        .into_iter()
        .filter(|row| row.get("source").and_then(Value::as_str) == Some("whatsapp"))
        .collect()
}

async fn outbox(agent: &Arc<Agent>) -> Vec<Map<String, Value>> {
    agent
        .store()
        .run(|file| file.messages(Mailbox::Outbox, &MessageFilter::default(), None))
        .await
        .unwrap()
}

fn json_column(row: &Map<String, Value>, column: &str) -> Value {
    match row.get(column) {
        Some(Value::String(text)) => serde_json::from_str(text).unwrap_or(Value::Null),
        Some(other) => other.clone(),
        None => Value::Null,
    }
}

/// The adapter's state as `GET /agents/{id}/runtime/adapters` reports it.
async fn adapter_state(h: &Harness, agent: &Agent) -> Value {
    let body = h
        .client
        .get(&format!("/agents/{}/runtime/adapters", agent.id))
        .await
        .unwrap();
    body["states"]
        .as_array()
        .and_then(|states| states.iter().find(|s| s["type"] == "whatsapp"))
        .cloned()
        .unwrap_or(Value::Null)
}

/// A client without the daemon's token, as Meta calls the webhook.
fn meta() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(30))
        .build()
        .unwrap()
}

async fn post_signed(h: &Harness, payload: &Value, secret: &str) -> (u16, String) {
    let body = payload.to_string();
    let response = meta()
        .post(format!("{}{WEBHOOK}", h.server.url()))
        .header("content-type", "application/json")
        .header("x-hub-signature-256", sign(secret, body.as_bytes()))
        .body(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap_or_default())
}

async fn running(h: &Harness, server: &GraphServer) -> Arc<Agent> {
    let path = whatsapp_agent(h, server);
    let agent = h.server.daemon.load(&path).await.unwrap().agent;
    wait_for("the adapter runs", || async {
        adapter_state(h, &agent).await["state"] == "running"
    })
    .await;
    agent
}

/// SRV-03 (the webhook is public through the front door), MSG-22, MSG-43: Meta's verification,
/// a signed message in as a row, the lambda's reply out to the Graph API quoting it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn srv_03_msg_22_msg_43_a_whatsapp_webhook_message_is_answered_through_the_daemon() {
    let server = GraphServer::start(TOKEN, PHONE).await;
    let h = Harness::start().await;
    let agent = running(&h, &server).await;

    let verify = |token: &str| {
        format!(
            "{}{WEBHOOK}?hub.mode=subscribe&hub.verify_token={token}&hub.challenge=31415",
            h.server.url()
        )
    };
    let ok = meta().get(verify(VERIFY)).send().await.unwrap();
    assert_eq!(ok.status().as_u16(), 200);
    assert_eq!(ok.text().await.unwrap(), "31415");
    let wrong = meta().get(verify("guess")).send().await.unwrap();
    assert_eq!(wrong.status().as_u16(), 403);
    // Other methods on the path still need the token.
    let put = meta()
        .put(format!("{}{WEBHOOK}", h.server.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(put.status().as_u16(), 401);

    let payload = webhook_payload(
        PHONE,
        &[(ANN, "Ann")],
        vec![text_message(ANN, "wamid.D1", "ping")],
        Vec::new(),
    );
    let (status, body) = post_signed(&h, &payload, APP_SECRET).await;
    assert_eq!(status, 200, "{body}");
    let rows = inbox(&agent).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    let row = &rows[0];
    assert_eq!(row["from"], json!(format!("whatsapp:{ANN}")));
    assert_eq!(row["content"], "ping");
    assert_eq!(json_column(row, "source_context")["message_id"], "wamid.D1");

    wait_for("the reply reached the Graph API", || async {
        !server.sends().is_empty()
    })
    .await;
    let sent = server.sends().remove(0);
    let row_id = row["id"].as_str().unwrap();
    assert_eq!(sent["to"], json!(ANN), "{sent}");
    assert_eq!(
        sent["text"]["body"],
        json!(format!("pong: {row_id}")),
        "{sent}"
    );
    assert_eq!(
        sent["context"]["message_id"],
        json!("wamid.D1"),
        "MSG-43: the reply quotes the message it answers: {sent}"
    );
    wait_for("the outbox row is delivered", || async {
        outbox(&agent)
            .await
            .iter()
            .any(|r| r["to"] == json!(format!("whatsapp:{ANN}")) && r["status"] == "delivered")
    })
    .await;

    // Meta re-sends the same notification: no second row, no second reply.
    let (status, _) = post_signed(&h, &payload, APP_SECRET).await;
    assert_eq!(status, 200);
    assert_eq!(inbox(&agent).await.len(), 1);
    h.stop().await;
}

/// A webhook POST with a signature of another secret is 401 before anything is stored, with
/// or without the daemon's token; an unknown agent is 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whatsapp_a_badly_signed_webhook_is_401_through_the_daemon_and_stores_no_row() {
    let server = GraphServer::start(TOKEN, PHONE).await;
    let h = Harness::start().await;
    let agent = running(&h, &server).await;
    let payload = webhook_payload(
        PHONE,
        &[(ANN, "Ann")],
        vec![text_message(ANN, "wamid.F1", "forged")],
        Vec::new(),
    );
    let (status, body) = post_signed(&h, &payload, "someone-elses-secret").await;
    assert_eq!(status, 401, "{body}");
    let unsigned = meta()
        .post(format!("{}{WEBHOOK}", h.server.url()))
        .bearer_auth(&h.token)
        .header("content-type", "application/json")
        .body(payload.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(
        unsigned.status().as_u16(),
        401,
        "the daemon's token is no signature"
    );
    let unknown = meta()
        .post(format!(
            "{}/agents/nobody/adapters/whatsapp/webhook",
            h.server.url()
        ))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status().as_u16(), 404);
    assert!(inbox(&agent).await.is_empty());
    assert!(server.sends().is_empty(), "nothing was answered");
    h.stop().await;
}

/// MSG-46: the agent's form goes out as WhatsApp reply buttons; a press comes back as an inbox
/// row threaded to the form's outbox row with form_id, question_id, answer_id, answer_value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msg_46_a_whatsapp_form_goes_out_as_buttons_and_a_press_comes_back_threaded() {
    let server = GraphServer::start(TOKEN, PHONE).await;
    let h = Harness::start().await;
    let agent = running(&h, &server).await;
    let ask = webhook_payload(
        PHONE,
        &[(ANN, "Ann")],
        vec![text_message(ANN, "wamid.FORM1", "lunch?")],
        Vec::new(),
    );
    assert_eq!(post_signed(&h, &ask, APP_SECRET).await.0, 200);
    wait_for("the form reached the Graph API", || async {
        !server.sends().is_empty()
    })
    .await;
    let form = server.sends().remove(0);
    assert_eq!(form["type"], json!("interactive"), "{form}");
    assert_eq!(form["interactive"]["type"], json!("button"), "{form}");
    assert_eq!(form["context"]["message_id"], json!("wamid.FORM1"));
    let veg = form["interactive"]["action"]["buttons"][1]["reply"].clone();
    assert_eq!(veg["title"], json!("Vegetables"), "{form}");
    let form_row = outbox(&agent)
        .await
        .into_iter()
        .find(|r| r["content_type"] == "application/vnd.adf.form+json")
        .unwrap();

    let press = webhook_payload(
        PHONE,
        &[(ANN, "Ann")],
        vec![button_reply(
            ANN,
            "wamid.ANSWER1",
            "wamid.OUT1",
            veg["id"].as_str().unwrap(),
            "Vegetables",
        )],
        Vec::new(),
    );
    assert_eq!(post_signed(&h, &press, APP_SECRET).await.0, 200);
    let rows = inbox(&agent).await;
    let answer = rows
        .iter()
        .find(|r| r["message_id"] == "whatsapp:wamid.ANSWER1")
        .unwrap();
    assert_eq!(answer["parent_id"], form_row["id"], "{answer:?}");
    let context = json_column(answer, "source_context");
    assert_eq!(context["form_id"], "lunch", "{context}");
    assert_eq!(context["question_id"], "main");
    assert_eq!(context["answer_id"], "veg");
    assert_eq!(context["answer_value"], "v");
    h.stop().await;
}
