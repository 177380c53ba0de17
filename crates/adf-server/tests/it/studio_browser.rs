//! The Studio in a real browser: headless Chromium (Debian's `chromium` and
//! `chromium-driver`, installed by `scripts/setup.d/40-chromium.sh`) driven over WebDriver
//! by `fantoccini`, against a daemon on 127.0.0.1 whose agent talks to the testkit's scripted
//! OpenAI-compatible mock.
//!
//! One walk through the page (every screen's form controls must have an accessible name): log in with the one-time link, open the fleet, create an agent,
//! chat and watch the reply stream in, approve a restricted tool call, answer an ask, edit a
//! file and a config field (a bad value first, refused inline), a config section form (the
//! daemon's refusal beside its field), edit a timer, watch an event arrive, set a credential
//! (listed, never shown), test two runtime providers (the loopback mock answers, a closed
//! loopback port fails with the provider's error), see the settings' MCP registrations, save a
//! default, and fork the agent into a new file.
//! Each screen is saved as a PNG under `$CARGO_TARGET_TMPDIR/studio-screenshots/` (look at
//! them), with `metrics.json` (first fleet render and streamed-token latencies as the page
//! measured them).
//!
//! Nothing here sleeps to synchronize: every wait polls a condition in the page (or the
//! daemon) with a generous failure guard, never a timing assumption.
//!
//! Set `ADF_SKIP_BROWSER_TESTS=1` to skip on a machine without Chromium; otherwise a missing
//! chromedriver fails the test with the command that installs it.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use adf_testkit::{MockProvider, Turn, Wire};
use common::{Harness, model_config, wait_for};
use fantoccini::{Client, ClientBuilder, Locator};
use reqwest::Method;
use serde_json::{Value, json};

const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
const CHROMIUM: &str = "/usr/bin/chromium";
/// How long any one condition in the page may take before the test fails.
const GUARD: Duration = Duration::from_secs(60);

/// chromedriver on a free loopback port, killed on drop.
struct Driver {
    child: tokio::process::Child,
    url: String,
}

impl Driver {
    async fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = tokio::process::Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .arg("--allowed-ips=127.0.0.1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let url = format!("http://127.0.0.1:{port}");
        wait_for("chromedriver to listen", || async {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
        })
        .await;
        Self { child, url }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

async fn browser(driver: &Driver, profile: &Path) -> Client {
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": CHROMIUM,
            "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run",
                "--disable-quic", "--window-size=1280,900",
                format!("--user-data-dir={}", profile.display()),
            ],
        }),
    );
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    ClientBuilder::new(connector)
        .capabilities(caps)
        .connect(&driver.url)
        .await
        .expect("chromedriver starts a Chromium session")
}

/// Polls `script` (a JS expression) in the page until it is truthy.
async fn until(c: &Client, what: &str, script: &str) {
    let code = format!("return !!({script});");
    let deadline = tokio::time::Instant::now() + GUARD;
    loop {
        if c.execute(&code, vec![]).await.unwrap() == Value::Bool(true) {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Finds `selector` and clicks it. The page redraws parts of itself as events arrive, so an
/// element found a moment ago can be replaced before the click lands; the click is retried on
/// a fresh lookup until it lands or the guard runs out.
async fn click(c: &Client, selector: &str) {
    let deadline = tokio::time::Instant::now() + GUARD;
    loop {
        match css(c, selector).await.click().await {
            Ok(()) => return,
            // Replaced by a redraw, not laid out yet, or under something mid-redraw.
            Err(error)
                if error.is_stale_element_reference()
                    || error.is_element_not_interactable()
                    || matches!(&error, fantoccini::error::CmdError::Standard(w)
                        if w.error == fantoccini::error::ErrorStatus::ElementClickIntercepted) =>
            {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "{selector} kept being replaced: {error}"
                );
            }
            Err(error) => panic!("clicking {selector}: {error}"),
        }
    }
}

/// Types `text` into `selector`, looking it up again when the page replaced it before the
/// keys landed or it cannot take them yet (as [`click`] does).
async fn fill(c: &Client, selector: &str, text: &str) {
    let deadline = tokio::time::Instant::now() + GUARD;
    loop {
        match css(c, selector).await.send_keys(text).await {
            Ok(()) => return,
            // Replaced by a redraw, or not laid out yet after one.
            Err(error)
                if error.is_stale_element_reference() || error.is_element_not_interactable() =>
            {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "{selector} kept being replaced: {error}"
                );
            }
            Err(error) => panic!("typing into {selector}: {error}"),
        }
    }
}

async fn css(c: &Client, selector: &str) -> fantoccini::elements::Element {
    c.wait()
        .at_most(GUARD)
        .for_element(Locator::Css(selector))
        .await
        .unwrap_or_else(|e| panic!("no element {selector}: {e}"))
}

/// Saves a screenshot of the screen, after checking that every form control on it has an
/// accessible name (a `<label>`, `aria-label` or `aria-labelledby`).
async fn shot(c: &Client, dir: &Path, name: &str) {
    let unlabeled = c
        .execute(
            "return [...document.querySelectorAll('input, select, textarea')]
               .filter(e => e.type !== 'hidden' && !(e.labels && e.labels.length)
                 && !e.getAttribute('aria-label') && !e.getAttribute('aria-labelledby'))
               .map(e => e.id || e.outerHTML.slice(0, 80));",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(
        unlabeled,
        json!([]),
        "{name}: form controls without a label"
    );
    let png = c.screenshot().await.unwrap();
    std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
}

fn screenshot_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("studio-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn chromium_available() -> bool {
    if std::env::var_os("ADF_SKIP_BROWSER_TESTS").is_some() {
        eprintln!("ADF_SKIP_BROWSER_TESTS is set: the Studio browser test is skipped");
        return false;
    }
    assert!(
        Path::new(CHROMEDRIVER).exists() && Path::new(CHROMIUM).exists(),
        "the Studio browser test needs Debian's chromium and chromium-driver: run scripts/setup.d/40-chromium.sh (or set ADF_SKIP_BROWSER_TESTS=1)"
    );
    true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn studio_drives_fleet_chat_approval_ask_files_config_identity_runtime_fork_and_events_in_chromium()
 {
    if !chromium_available() {
        return;
    }
    let mock = MockProvider::start(Wire::OpenAi).await;
    mock.push_all([
        // Chat 1: a reply streamed in small chunks.
        Turn::text("Hello from the scripted model, streamed a few characters at a time.")
            .with_chunk_chars(6),
        // Chat 2: a restricted call (sys_update_config) waits for the owner's approval.
        Turn::tool_call(
            "sys_update_config",
            json!({ "path": "description", "value": "approved in the Studio" }),
        ),
        Turn::text("Description updated."),
        // Chat 3: an ask waits for the owner's answer.
        Turn::tool_call(
            "ask",
            json!({ "question": "Which colour should the report be?" }),
        ),
        Turn::text("Teal it is."),
    ]);
    let h = Harness::start().await;
    let shots = screenshot_dir();
    let driver = Driver::start().await;
    let profile = tempfile::tempdir().unwrap();
    let c = browser(&driver, profile.path()).await;
    let base = h.server.url();

    // Without a session the browser is told how to log in (and gets no page data).
    c.goto(&format!("{base}/")).await.unwrap();
    until(
        &c,
        "the login hint",
        "document.body.textContent.includes('adf studio')",
    )
    .await;
    assert!(c.find(Locator::Css("#create-form")).await.is_err());

    // Log in with the one-time link: the cookie is the session from here on.
    c.goto(&h.server.login_url()).await.unwrap();
    css(&c, "#create-form").await;
    assert_eq!(c.current_url().await.unwrap().path(), "/");

    // Fleet: create an agent.
    fill(&c, "#create-name", "Studio Scout").await;
    fill(&c, "#create-description", "made in the browser test").await;
    click(&c, "#create-submit").await;
    until(
        &c,
        "the agent view",
        "document.querySelector('#chat-input')",
    )
    .await;
    let agent = h.server.daemon.agent("studio-scout").unwrap();
    assert!(agent.file_path().ends_with("studio-scout.adf"));
    assert_eq!(agent.info().name, "Studio Scout");

    // Point the new agent at the mock (the provider's URL is the test's, not a page field).
    let mut config = common::stored_config(&h, &agent).await;
    for (path, value) in model_config(&mock) {
        let mut at = &mut config;
        let keys: Vec<&str> = path.split('.').collect();
        for key in &keys[..keys.len() - 1] {
            at = &mut at[*key];
        }
        at[keys[keys.len() - 1]] = value;
    }
    let (status, body) = h
        .client
        .raw(
            Method::PUT,
            &format!("/agents/{}/config", agent.id),
            Some(&config),
        )
        .await
        .unwrap();
    assert_eq!(status, 200, "{body}");

    // The fleet lists it, with its model.
    c.goto(&format!("{base}/#/")).await.unwrap();
    until(
        &c,
        "the fleet row",
        &format!("document.querySelector('tr[data-agent=\"{}\"]')", agent.id),
    )
    .await;
    until(
        &c,
        "the model in the row",
        "document.querySelector('#fleet tbody').textContent.includes('mock-model')",
    )
    .await;
    shot(&c, &shots, "1-fleet").await;

    // Chat: the reply streams into the page through the live feed.
    c.goto(&format!("{base}/#/agent/{}/loop", agent.id))
        .await
        .unwrap();
    until(&c, "the live feed to connect", "window.studioMetrics.connected['/studio/api/agents/' + location.hash.split('/')[2] + '/live']").await;
    fill(&c, "#chat-input", "hello").await;
    click(&c, "#chat-send").await;
    until(
        &c,
        "streamed text",
        "window.studioMetrics.tokenLatencies.length > 1",
    )
    .await;
    until(
        &c,
        "the whole reply",
        "document.querySelector('#transcript').textContent.includes('streamed a few characters at a time.')",
    )
    .await;
    until(
        &c,
        "the turn's time breakdown",
        "document.querySelector('#turn-timing').textContent.includes('model ')",
    )
    .await;
    until(
        &c,
        "the context fill",
        "document.querySelector('#context-fill-text').textContent.includes('of 100,000 tokens before compaction')",
    )
    .await;
    until(
        &c,
        "the display state back on the badge",
        "document.querySelector('#agent-state').textContent === 'active'",
    )
    .await;
    shot(&c, &shots, "2-chat-streamed").await;

    // Approval: the restricted call waits; the owner approves it inline.
    fill(&c, "#chat-input", "update your description").await;
    click(&c, "#chat-send").await;
    css(&c, "button[data-approve]").await;
    assert!(
        css(&c, "#pending")
            .await
            .text()
            .await
            .unwrap()
            .contains("sys_update_config"),
        "the approval names the tool"
    );
    shot(&c, &shots, "3-approval").await;
    click(&c, "button[data-approve]").await;
    until(
        &c,
        "the reply after approval",
        "document.querySelector('#transcript').textContent.includes('Description updated.')",
    )
    .await;
    let described = h
        .client
        .get(&format!("/agents/{}/config", agent.id))
        .await
        .unwrap();
    assert_eq!(described["config"]["description"], "approved in the Studio");

    // Ask: answered inline; the model reads the answer. The approved turn's reply is on the
    // page before its turn has handed the file back: the next message is sent once the agent
    // reads idle, as a person would see it.
    let deadline = std::time::Instant::now() + GUARD;
    loop {
        let status = h
            .client
            .get(&format!("/agents/{}/status", agent.id))
            .await
            .unwrap();
        if status["runtimeState"] == "idle" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the approved turn never ended: {status}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    fill(&c, "#chat-input", "make the report").await;
    click(&c, "#chat-send").await;
    css(&c, "input[data-ask-input]").await;
    assert!(
        css(&c, "#pending")
            .await
            .text()
            .await
            .unwrap()
            .contains("Which colour should the report be?")
    );
    fill(&c, "input[data-ask-input]", "teal, please").await;
    shot(&c, &shots, "4-ask").await;
    click(&c, "form[data-ask] button[type=submit]").await;
    until(
        &c,
        "the reply after the answer",
        "document.querySelector('#transcript').textContent.includes('Teal it is.')",
    )
    .await;
    let sent = mock.last_request().unwrap().body.to_string();
    assert!(
        sent.contains("teal, please"),
        "the model read the owner's answer"
    );
    assert_eq!(mock.remaining(), 0, "every scripted turn was used");

    // Files: open one, edit it, save; the daemon stores the new text.
    c.goto(&format!("{base}/#/agent/{}/files", agent.id))
        .await
        .unwrap();
    click(&c, "button[data-path=\"mind.md\"]").await;
    let text = css(&c, "#file-text").await;
    text.clear().await.unwrap();
    text.send_keys("# Notes\nEdited in the Studio.\n")
        .await
        .unwrap();
    click(&c, "#file-save").await;
    wait_for("the edited file", || async {
        h.client
            .get(&format!("/agents/{}/files/content?path=mind.md", agent.id))
            .await
            .is_ok_and(|f| f["content"] == "# Notes\nEdited in the Studio.\n")
    })
    .await;
    shot(&c, &shots, "5-files").await;

    // Config: a bad temperature is refused inline and not saved; a good one is saved.
    c.goto(&format!("{base}/#/agent/{}/config", agent.id))
        .await
        .unwrap();
    let temperature = css(&c, "#cfg-model-temperature").await;
    temperature.clear().await.unwrap();
    temperature.send_keys("7").await.unwrap();
    click(&c, "#config-save").await;
    until(
        &c,
        "the inline error",
        "document.querySelector('#cfg-model-temperature-error').textContent.includes('0 to 2')",
    )
    .await;
    assert_eq!(
        temperature.attr("aria-invalid").await.unwrap().as_deref(),
        Some("true")
    );
    shot(&c, &shots, "6-config-error").await;
    let stored = h
        .client
        .get(&format!("/agents/{}/config", agent.id))
        .await
        .unwrap();
    assert_ne!(stored["config"]["model"]["temperature"], json!(7));
    temperature.clear().await.unwrap();
    temperature.send_keys("0.3").await.unwrap();
    click(&c, "#config-save").await;
    wait_for("the saved temperature", || async {
        h.client
            .get(&format!("/agents/{}/config", agent.id))
            .await
            .is_ok_and(|c| c["config"]["model"]["temperature"] == json!(0.3))
    })
    .await;

    // The raw JSON view: a value the store's validation refuses is shown, nothing is saved.
    click(&c, "#config-raw-box summary").await;
    c.execute(
        "const raw = document.querySelector('#config-raw');
         const config = JSON.parse(raw.value);
         config.state = 'sleepy';
         raw.value = JSON.stringify(config, null, 2);",
        vec![],
    )
    .await
    .unwrap();
    click(&c, "#config-raw-save").await;
    until(
        &c,
        "the store's validation error",
        "document.querySelector('#config-raw-error').textContent.includes('state')",
    )
    .await;
    shot(&c, &shots, "6b-config-raw-error").await;
    let stored = h
        .client
        .get(&format!("/agents/{}/config", agent.id))
        .await
        .unwrap();
    assert_eq!(
        stored["config"]["state"], "active",
        "the refused config is not stored"
    );

    // Config section forms: messaging's mode refused by the daemon shows beside its field;
    // a trigger toggled off is stored.
    c.goto(&format!("{base}/#/agent/{}/config", agent.id))
        .await
        .unwrap();
    click(&c, "#section-messaging summary").await;
    let mode = css(&c, "#sec-messaging-mode").await;
    mode.clear().await.unwrap();
    mode.send_keys("shouting").await.unwrap();
    click(&c, "#section-messaging-save").await;
    until(
        &c,
        "the daemon's error beside messaging.mode",
        "document.querySelector('#sec-messaging-mode-error').textContent.includes('messaging.mode')
           && document.querySelector('#sec-messaging-mode').getAttribute('aria-invalid') === 'true'",
    )
    .await;
    shot(&c, &shots, "6c-config-section-error").await;
    let stored = h
        .client
        .get(&format!("/agents/{}/config", agent.id))
        .await
        .unwrap();
    assert_eq!(stored["config"]["messaging"]["mode"], "proactive");
    click(&c, "#section-triggers summary").await;
    click(&c, "#sec-triggers-on-inbox-enabled").await;
    click(&c, "#section-triggers-save").await;
    wait_for("the trigger toggle stored", || async {
        h.client
            .get(&format!("/agents/{}/config", agent.id))
            .await
            .is_ok_and(|c| c["config"]["triggers"]["on_inbox"]["enabled"] == json!(false))
    })
    .await;

    // Timers: one added from the form is stored; a bad schedule is refused inline.
    c.goto(&format!("{base}/#/agent/{}/timers", agent.id))
        .await
        .unwrap();
    fill(&c, "#timer-value", "not a number").await;
    fill(&c, "#timer-value", "\u{E007}").await;
    until(
        &c,
        "the timer error",
        "document.querySelector('#timer-error').textContent.includes('milliseconds')",
    )
    .await;
    let value = css(&c, "#timer-value").await;
    value.clear().await.unwrap();
    value.send_keys("3600000").await.unwrap();
    fill(&c, "#timer-payload", "hourly check").await;
    fill(&c, "#timer-value", "\u{E007}").await;
    wait_for("the stored timer", || async {
        h.client
            .get(&format!("/agents/{}/timers", agent.id))
            .await
            .is_ok_and(|t| t["timers"].as_array().is_some_and(|list| list.len() == 1))
    })
    .await;
    until(
        &c,
        "the timer row",
        "document.querySelectorAll('main table tbody tr').length === 1",
    )
    .await;
    until(
        &c,
        "the next fire, in the future",
        "/in \\d+ min/.test(document.querySelector('main table tbody tr').textContent)",
    )
    .await;
    shot(&c, &shots, "6c-timers").await;
    // Edit: the same timer (same id) is rewritten to an interval.
    let timers = h
        .client
        .get(&format!("/agents/{}/timers", agent.id))
        .await
        .unwrap();
    let timer_id = timers["timers"][0]["id"].clone();
    click(&c, &format!("button[data-timer-edit=\"{timer_id}\"]")).await;
    c.execute(
        "document.querySelector('#timer-mode').value = 'interval';
         document.querySelector('#timer-value').value = '120000';",
        vec![],
    )
    .await
    .unwrap();
    click(&c, "#timer-submit").await;
    wait_for("the timer rewritten in place", || async {
        h.client
            .get(&format!("/agents/{}/timers", agent.id))
            .await
            .is_ok_and(|t| {
                let list = t["timers"].as_array().cloned().unwrap_or_default();
                list.len() == 1
                    && list[0]["id"] == timer_id
                    && list[0].to_string().contains("120000")
            })
    })
    .await;

    // Events: an event published while the tab is open appears in it.
    c.goto(&format!("{base}/#/agent/{}/events", agent.id))
        .await
        .unwrap();
    until(
        &c,
        "the event stream",
        "window.studioMetrics.connected['/events']",
    )
    .await;
    let (status, _) = h
        .client
        .raw(
            Method::PUT,
            &format!("/agents/{}/files/content?path=notes/arrived.md", agent.id),
            Some(&json!({ "content": "hello" })),
        )
        .await
        .unwrap();
    assert_eq!(status, 200);
    until(
        &c,
        "the file.written event",
        "[...document.querySelectorAll('#event-list li[data-event=\"file.written\"]')].some(li => li.textContent.includes('notes/arrived.md'))",
    )
    .await;
    // Any event name, an agent's own `custom.*` ones included.
    h.server
        .daemon
        .emit(
            &agent,
            "custom.studio_probe",
            "system:test",
            json!({ "n": 1 }),
        )
        .await;
    until(
        &c,
        "the custom event",
        "document.querySelector('#event-list li[data-event=\"custom.studio_probe\"]')",
    )
    .await;
    shot(&c, &shots, "7-events").await;

    // Identity: a credential set from the page is listed as set, never shown.
    c.goto(&format!("{base}/#/agent/{}/identity", agent.id))
        .await
        .unwrap();
    until(
        &c,
        "the identity status",
        "document.querySelector('#identity-status dd code')",
    )
    .await;
    fill(&c, "#cred-purpose", "mcp:studio-probe:TOKEN").await;
    fill(&c, "#cred-value", "s3cret-never-shown").await;
    click(&c, "#cred-submit").await;
    until(
        &c,
        "the credential listed as set",
        "document.querySelector('tr[data-purpose=\"mcp:studio-probe:TOKEN\"]')",
    )
    .await;
    let page = c
        .execute("return document.documentElement.outerHTML", vec![])
        .await
        .unwrap();
    assert!(!page.as_str().unwrap().contains("s3cret-never-shown"));
    let listed = h
        .client
        .get(&format!("/agents/{}/identities", agent.id))
        .await
        .unwrap();
    assert!(
        listed["identities"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["purpose"] == "mcp:studio-probe:TOKEN")
    );
    shot(&c, &shots, "7c-identity").await;

    // Runtime settings: providers from the settings with a working test button (against the
    // loopback mock) and a failing one (a closed loopback port), MCP registrations, defaults.
    let closed_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (status, _) = h
        .client
        .raw(
            Method::PUT,
            "/settings/providers",
            Some(&json!({ "value": [
                { "id": "loop-mock", "type": "openai-compatible", "name": "Loopback mock",
                  "baseUrl": mock.base_url(), "defaultModel": "mock-model", "apiKey": "sk-test-hidden" },
                { "id": "loop-closed", "type": "openai-compatible", "name": "Nobody home",
                  "baseUrl": format!("http://127.0.0.1:{closed_port}/v1"), "defaultModel": "m" },
            ] })),
        )
        .await
        .unwrap();
    assert_eq!(status, 200);
    let (status, _) = h
        .client
        .raw(
            Method::PUT,
            "/settings/mcpServers",
            Some(&json!({ "value": [
                { "name": "probe-server", "command": "probe-mcp", "env": { "PROBE_TOKEN": "mcp-secret-hidden" } },
            ] })),
        )
        .await
        .unwrap();
    assert_eq!(status, 200);
    mock.push(Turn::text("OK"));
    c.goto(&format!("{base}/#/runtime")).await.unwrap();
    until(
        &c,
        "the runtime sections",
        "document.querySelectorAll('main section.card').length === 6
           && document.querySelector('button[data-provider-test=\"loop-mock\"]')
           && document.querySelector('#mcp-list') && document.querySelector('#defaults-form')",
    )
    .await;
    click(&c, "button[data-provider-test=\"loop-mock\"]").await;
    until(
        &c,
        "the provider test's answer",
        "(e => e.dataset.ok === 'true' && e.textContent.includes('OK'))(document.querySelector('[data-provider-result=\"loop-mock\"]'))",
    )
    .await;
    click(&c, "button[data-provider-test=\"loop-closed\"]").await;
    until(
        &c,
        "the failing provider's error",
        "(e => e.dataset.ok === 'false' && e.textContent.includes('loop-closed'))(document.querySelector('[data-provider-result=\"loop-closed\"]'))",
    )
    .await;
    let page = c
        .execute("return document.documentElement.outerHTML", vec![])
        .await
        .unwrap();
    assert!(!page.as_str().unwrap().contains("sk-test-hidden"));
    assert!(!page.as_str().unwrap().contains("not available yet"));
    assert!(!page.as_str().unwrap().contains("mcp-secret-hidden"));
    assert!(page.as_str().unwrap().contains("probe-server"));
    shot(&c, &shots, "7b-runtime").await;
    // Defaults: a bad value is refused in the page, a good one is stored.
    let threshold = css(&c, "#default-autoCompactThreshold").await;
    threshold.clear().await.unwrap();
    threshold.send_keys("lots").await.unwrap();
    threshold.send_keys("\u{E007}").await.unwrap();
    until(
        &c,
        "the defaults error",
        "document.querySelector('#defaults-error').textContent.includes('whole number')",
    )
    .await;
    threshold.clear().await.unwrap();
    threshold.send_keys("50000").await.unwrap();
    threshold.send_keys("\u{E007}").await.unwrap();
    wait_for("the default stored", || async {
        h.client
            .get("/settings/autoCompactThreshold")
            .await
            .is_ok_and(|s| s["value"] == json!(50000))
    })
    .await;

    // Fork: the copy is a new agent with the parent's files and its own identity.
    c.goto(&format!("{base}/#/agent/{}/loop", agent.id))
        .await
        .unwrap();
    click(&c, "#fork-box summary").await;
    let fork_name = css(&c, "#fork-name").await;
    fork_name.clear().await.unwrap();
    fork_name.send_keys("Studio Scout Copy").await.unwrap();
    shot(&c, &shots, "7d-fork").await;
    click(&c, "#fork-submit").await;
    wait_for("the fork loaded", || async {
        h.server.daemon.agent("studio-scout-copy").is_ok()
    })
    .await;
    let fork = h.server.daemon.agent("studio-scout-copy").unwrap();
    assert_ne!(fork.id, agent.id);
    until(
        &c,
        "the fork's page",
        &format!("location.hash.includes('{}')", fork.id),
    )
    .await;
    let copied = h
        .client
        .get(&format!(
            "/agents/{}/files/content?path=notes/arrived.md",
            fork.id
        ))
        .await
        .unwrap();
    assert_eq!(copied["content"], "hello");
    let (parent_did, fork_did) = (
        crate::common::did_of(&h, &agent.id).await,
        crate::common::did_of(&h, &fork.id).await,
    );
    assert!(fork_did.starts_with("did:"), "{fork_did}");
    assert_ne!(parent_did, fork_did);
    shot(&c, &shots, "7e-forked").await;

    // Narrow screen: the fleet still renders its rows.
    c.set_window_size(390, 844).await.unwrap();
    c.goto(&format!("{base}/#/")).await.unwrap();
    until(
        &c,
        "the narrow fleet",
        &format!("document.querySelector('tr[data-agent=\"{}\"]')", agent.id),
    )
    .await;
    shot(&c, &shots, "8-fleet-narrow").await;

    let metrics = c
        .execute("return window.studioMetrics", vec![])
        .await
        .unwrap();
    std::fs::write(
        shots.join("metrics.json"),
        serde_json::to_string_pretty(&metrics).unwrap(),
    )
    .unwrap();
    eprintln!("screenshots and metrics in {}", shots.display());
    c.close().await.unwrap();
    h.stop().await;
}

/// Issue 29.3/29.4 in the page: while a model request waits to be retried the chat says so
/// ("retrying in 1 s (2/2): rate limited (429)"), an aborted turn and a failed one each end
/// with a line of the chat saying what happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn studio_shows_retries_an_aborted_turn_and_a_failed_turn_in_the_chat() {
    if !chromium_available() {
        return;
    }
    let mock = MockProvider::start(Wire::OpenAi).await;
    // Chat 1: rate limited, then the retry hangs until the owner aborts.
    // Chat 2: two 503s, the second one final.
    mock.push_all([
        Turn::rate_limited(1),
        Turn::hang(),
        Turn::unavailable(),
        Turn::unavailable(),
    ]);
    let h = Harness::start().await;
    let mut config = model_config(&mock);
    config.retain(|(key, _)| *key != "recovery");
    config.push((
        "recovery",
        json!({ "auto_retry": true, "max_attempts": 2, "base_delay_ms": 1, "max_delay_ms": 60000 }),
    ));
    let path = common::agent_file(h.dir.path(), "retrier", &[], &config);
    let agent = h.server.daemon.load(&path).await.unwrap().agent;
    let driver = Driver::start().await;
    let profile = tempfile::tempdir().unwrap();
    let c = browser(&driver, profile.path()).await;
    let shots = screenshot_dir();
    c.goto(&h.server.login_url()).await.unwrap();
    css(&c, "#fleet tbody tr").await;
    c.goto(&format!("{}/#/agent/{}/loop", h.server.url(), agent.id))
        .await
        .unwrap();
    until(&c, "the live feed to connect", "window.studioMetrics.connected['/studio/api/agents/' + location.hash.split('/')[2] + '/live']").await;
    fill(&c, "#chat-input", "first").await;
    click(&c, "#chat-send").await;
    until(
        &c,
        "the retry line",
        "[...document.querySelectorAll('#transcript .msg.retry')].some((e) => e.textContent === 'retrying in 1 s (2/2): rate limited (429)')",
    )
    .await;
    tokio::time::timeout(GUARD, mock.requests_arrived(2))
        .await
        .expect("the retry was sent");
    shot(&c, &shots, "retry-line").await;
    click(&c, "#chat-abort").await;
    until(
        &c,
        "the aborted turn's line",
        "[...document.querySelectorAll('#transcript [data-turn-end=\"turn_aborted\"]')].some((e) => e.textContent.startsWith('turn aborted by the owner'))",
    )
    .await;
    fill(&c, "#chat-input", "second").await;
    click(&c, "#chat-send").await;
    until(
        &c,
        "the failed turn's line",
        "[...document.querySelectorAll('#transcript .msg.turn-end.failed')].some((e) => e.textContent.startsWith('turn failed: mock failed transiently (503)'))",
    )
    .await;
    shot(&c, &shots, "failed-turn").await;
    assert_eq!(mock.request_count(), 4);
    c.close().await.unwrap();
    h.stop().await;
}

/// Measures (does not judge) the Studio's first paint of the fleet with 1,000 loaded agents:
/// five fresh loads of `/`, each reporting `first-contentful-paint` and the moment the
/// first fleet page was rendered (`studioMetrics.fleetRenderedMs`, from navigation start).
/// Ignored by default (it creates 1,000 files); run it with
/// `cargo test -p adf-server --test it studio_first_paint -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement for BENCHMARKS.md, not a check"]
async fn studio_first_paint_with_1000_agents() {
    if !chromium_available() {
        return;
    }
    let h = Harness::start().await;
    for n in 0..1000 {
        let path = common::agent_file(h.dir.path(), &format!("agent-{n:04}"), &[], &[]);
        h.server.daemon.load(&path).await.unwrap();
    }
    assert_eq!(h.server.daemon.agents().len(), 1000);
    let driver = Driver::start().await;
    let profile = tempfile::tempdir().unwrap();
    let c = browser(&driver, profile.path()).await;
    c.goto(&h.server.login_url()).await.unwrap();
    css(&c, "#fleet tbody tr").await;
    let mut samples = Vec::new();
    for _ in 0..5 {
        c.goto(&format!("{}/?fresh={}", h.server.url(), samples.len()))
            .await
            .unwrap();
        until(
            &c,
            "the fleet page",
            "window.studioMetrics && window.studioMetrics.fleetRenderedMs !== null",
        )
        .await;
        let rows = c
            .execute(
                "return document.querySelectorAll('#fleet tbody tr').length",
                vec![],
            )
            .await
            .unwrap();
        assert_eq!(rows, json!(50), "one page of 50 rows");
        let sample = c
            .execute(
                "const fcp = performance.getEntriesByName('first-contentful-paint')[0];
                 return { fcp: fcp ? fcp.startTime : null, fleet: window.studioMetrics.fleetRenderedMs };",
                vec![],
            )
            .await
            .unwrap();
        samples.push(sample);
    }
    eprintln!("first paint with 1000 agents (ms from navigation start): {samples:?}");
    let shots = screenshot_dir();
    std::fs::write(
        shots.join("first-paint-1000.json"),
        serde_json::to_string_pretty(&samples).unwrap(),
    )
    .unwrap();
    shot(&c, &shots, "9-fleet-1000").await;
    c.close().await.unwrap();
    h.stop().await;
}

/// The agent page's Adapters tab: each adapter's state, error and restarts, changing live as
/// the daemon publishes `adapter.status.changed` (the table is never redrawn), and a
/// write-only credential form: set (the adapter restarts and runs), listed as set and never
/// shown, deleted (the adapter fails again naming the key), and the credential check button.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn studio_shows_adapter_states_live_and_sets_the_adapter_credential_write_only() {
    if !chromium_available() {
        return;
    }
    const TOKEN: &str = "515151:STUDIO-test-token";
    const PURPOSE: &str = "adapter:telegram:TELEGRAM_BOT_TOKEN";
    let server = adf_testkit::telegram::TelegramServer::start(TOKEN, "adf_studio_bot").await;
    let h = Harness::start().await;
    let path = common::agent_file(
        h.dir.path(),
        "courier",
        &[],
        &[
            (
                "adapters",
                json!({ "telegram": {
                    "enabled": true,
                    "config": { "api_root": server.api_root(), "poll_timeout": 1 },
                } }),
            ),
            ("security.allow_local_fetch", json!(true)),
        ],
    );
    common::provision_identity(&h, &path);
    let agent = h.server.daemon.load(&path).await.unwrap().agent;
    let driver = Driver::start().await;
    let profile = tempfile::tempdir().unwrap();
    let c = browser(&driver, profile.path()).await;
    let shots = screenshot_dir();
    c.goto(&h.server.login_url()).await.unwrap();
    css(&c, "#fleet tbody tr").await;
    c.goto(&format!("{}/#/agent/{}/adapters", h.server.url(), agent.id))
        .await
        .unwrap();
    let state =
        "document.querySelector('tr[data-adapter=\"telegram\"] .adapter-state')?.textContent";
    until(
        &c,
        "the missing credential's failure with its key",
        &format!(
            "{state} === 'failed' && document.querySelector('tr[data-adapter=\"telegram\"] .adapter-error').textContent.includes('{PURPOSE}')"
        ),
    )
    .await;
    until(
        &c,
        "the event stream",
        "window.studioMetrics.connected['/events']",
    )
    .await;
    shot(&c, &shots, "adapters-1-failed").await;
    // Marks the table: a redraw would lose the mark, so the states below arrive live.
    c.execute(
        "document.getElementById('adapter-states').dataset.probe = 'kept'; return true;",
        vec![],
    )
    .await
    .unwrap();

    fill(&c, "#adapter-cred-key", "TELEGRAM_BOT_TOKEN").await;
    fill(&c, "#adapter-cred-value", TOKEN).await;
    click(&c, "#adapter-cred-submit").await;
    until(
        &c,
        "the adapter running with the new credential, live",
        &format!("{state} === 'running' && document.getElementById('adapter-states').dataset.probe === 'kept'"),
    )
    .await;
    until(
        &c,
        "the credential listed as set",
        "document.querySelector('#adapter-credentials tr[data-credential=\"TELEGRAM_BOT_TOKEN\"]')",
    )
    .await;
    let page = c
        .execute("return document.documentElement.outerHTML", vec![])
        .await
        .unwrap();
    assert!(
        !page.as_str().unwrap().contains(TOKEN),
        "the value never reaches the page"
    );
    click(&c, "button[data-test-adapter=\"telegram\"]").await;
    until(
        &c,
        "the credential check's answer",
        "document.querySelector('tr[data-adapter=\"telegram\"] .adapter-test-result.ok')?.textContent.includes('@adf_studio_bot')",
    )
    .await;
    shot(&c, &shots, "adapters-2-running").await;

    // A change the page did not make (the owner's API): the state follows live.
    h.client
        .call(
            Method::POST,
            &format!("/agents/{}/runtime/adapters", agent.id),
            Some(&json!({ "adapterType": "telegram", "config": {
                "enabled": false, "config": { "api_root": server.api_root() } } })),
        )
        .await
        .unwrap();
    until(
        &c,
        "the disabled adapter, live",
        &format!("{state} === 'disabled' || {state} === 'stopped'"),
    )
    .await;
    h.client
        .call(
            Method::POST,
            &format!("/agents/{}/runtime/adapters", agent.id),
            Some(&json!({ "adapterType": "telegram", "config": {
                "enabled": true, "config": { "api_root": server.api_root(), "poll_timeout": 1 } } })),
        )
        .await
        .unwrap();
    until(
        &c,
        "running again, live",
        &format!("{state} === 'running' && document.getElementById('adapter-states').dataset.probe === 'kept'"),
    )
    .await;

    // Deleting the credential restarts the adapter without it: failed, naming the key.
    click(&c, "button[data-delete-credential=\"TELEGRAM_BOT_TOKEN\"]").await;
    until(
        &c,
        "the failure after the delete, live",
        &format!("{state} === 'failed' && document.getElementById('adapter-states').dataset.probe === 'kept'"),
    )
    .await;
    let purposes = h
        .client
        .get(&format!("/agents/{}/identities", agent.id))
        .await
        .unwrap();
    assert!(
        !purposes.to_string().contains(PURPOSE),
        "deleted: {purposes}"
    );
    shot(&c, &shots, "adapters-3-deleted").await;
    c.close().await.unwrap();
    h.stop().await;
}

/// The agent page's Compute tab shows what this machine can run for the agent (the isolation
/// tool `GET /compute/status` finds), each allowed target's state and the declared packages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cfg_37_studio_shows_compute_status_and_each_allowed_target() {
    if !chromium_available() {
        return;
    }
    let h = Harness::start().await;
    let path = common::agent_file(
        h.dir.path(),
        "cruncher",
        &[],
        &[
            (
                "compute",
                json!({
                    "enabled": true,
                    "host_access": true,
                    "allowed_targets": ["isolated", "host"],
                    "default_target": "isolated",
                    "packages": { "pip": ["numpy"] },
                }),
            ),
            (
                "code_execution.packages",
                json!([{ "name": "left-pad", "version": "1.3.0" }]),
            ),
        ],
    );
    let agent = h.server.daemon.load(&path).await.unwrap().agent;
    // What the page must say, from the daemon's own answer.
    let status = h
        .client
        .call(Method::GET, "/compute/status", None)
        .await
        .unwrap();
    let isolation = status["isolation"]
        .as_str()
        .map_or("none (compute_exec fails closed)".to_owned(), str::to_owned);
    let sandbox_runs = status["bubblewrap"]["available"] == json!(true);
    let driver = Driver::start().await;
    let profile = tempfile::tempdir().unwrap();
    let c = browser(&driver, profile.path()).await;
    c.goto(&h.server.login_url()).await.unwrap();
    css(&c, "#fleet tbody tr").await;
    c.goto(&format!("{}/#/agent/{}/compute", h.server.url(), agent.id))
        .await
        .unwrap();
    until(
        &c,
        "the machine's isolation tool",
        &format!(
            "document.getElementById('compute-isolation')?.textContent === {}",
            json!(isolation)
        ),
    )
    .await;
    let isolated =
        "document.querySelector('tr[data-target=\"isolated\"] .compute-target-state').textContent";
    let expected = if sandbox_runs {
        "can run"
    } else {
        "cannot run"
    };
    until(
        &c,
        "the isolated target's state on this machine",
        &format!("{isolated}.startsWith({})", json!(expected)),
    )
    .await;
    until(
        &c,
        "the host target waiting on the runtime setting",
        "document.querySelector('tr[data-target=\"host\"] .compute-target-state').textContent.includes('compute.hostAccess')",
    )
    .await;
    until(
        &c,
        "the declared packages",
        "document.getElementById('compute-npm').textContent.includes('left-pad@1.3.0') && document.getElementById('compute-pip').textContent.includes('numpy')",
    )
    .await;
    shot(&c, &screenshot_dir(), "compute-1").await;
    c.close().await.unwrap();
    h.stop().await;
}
