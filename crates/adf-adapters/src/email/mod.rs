//! The Email adapter: IMAP in (IDLE, with a poll fallback), SMTP submission out.
//!
//! Credential: `adf_identity` purpose [`CREDENTIAL_PURPOSE`] (the mailbox password; the same
//! for IMAP and SMTP). Config (`adapters.email.config`):
//! - `address` (required): the agent's address, the `From` of its mail;
//! - `username`: the login for both servers (default `address`);
//! - `display_name`: the name shown with `address`;
//! - `imap_host` (required), `imap_port`, `imap_security` (`tls` (default, port 993),
//!   `starttls` (143) or `none` (143, loopback hosts only));
//! - `smtp_host` (default `imap_host`), `smtp_port`, `smtp_security` (`starttls` (default,
//!   port 587), `tls` (465) or `none` (25, loopback hosts only));
//! - `mailbox` (default `INBOX`); `poll_interval` (seconds between checks when the server has
//!   no IDLE, default [`DEFAULT_POLL_INTERVAL_SECS`]).
//!
//! Receiving: log in, select the mailbox, then fetch every mail with a UID above the one last
//! stored, convert it (`inbound.rs`, policy first), store its attachments within
//! `limits.max_attachment_size` under `imported/email/`, write the row through the sink, and
//! only then persist the UID in `<agent>.adf.adapters/email/mailbox.json` with the mailbox's
//! UIDVALIDITY. A restart continues after that UID; a changed UIDVALIDITY (the server renumbered
//! the mailbox) or a first start takes the mailbox's unseen mail, and rows keyed by the
//! `Message-ID` (the sink keeps `message_id` unique) stop a mail from being stored twice. Then
//! IDLE until the server reports a change (re-issued every [`IDLE_RENEW`]), or, on a server
//! without IDLE, wait `poll_interval`. Mail is fetched with `BODY.PEEK`, so its flags stay the
//! owner's. A mail larger than the attachment limit plus [`TEXT_ALLOWANCE`] is fetched only up
//! to that size: its text is kept, its attachments are recorded as skipped.
//!
//! Sending: one `text/plain` mail to the recipient's address over SMTP submission (AUTH with
//! the credential when the server offers it). A reply (with the inbox row's `source_context`)
//! threads: `In-Reply-To` the mail answered, `References` its chain, `Re: <subject>`. A form is
//! the plain-text questionnaire; its Message-ID is kept in `forms.json`, so a reply to it
//! becomes the answer row (`form_id`, `question_id`, `answer_id`, `answer_value`, and every
//! answer in `answers`). The server's refusal (e.g. `550 … User unknown`) is the failed
//! delivery's reason and code.
//!
//! Plain text (`none`) is refused for anything but a loopback host: a password never crosses
//! a network in the clear. Every connection is opened by `adf_egress::connect_tcp` after the
//! agent's policy admits the address (`connect.rs`).

mod connect;
mod forms;
mod inbound;

use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::TryStreamExt;
use lettre::message::{Mailbox, header::ContentType};
use lettre::transport::smtp::authentication::{Credentials, Mechanism};
use lettre::transport::smtp::extension::ClientId;
use serde_json::{Value, json};

use crate::config::AdapterSettings;
use crate::error::AdapterError;
use crate::form_memory::FormMemory;
use crate::forms::{FORM_CONTENT_TYPE, Form, questionnaire_text};
use crate::message::{Delivered, OutboundMessage, parse_recipient};
use crate::platform::Building;
use crate::sink::{AdapterSink, Secret};
use crate::state_dir::StateDir;
use crate::{Adapter, BoxFuture, Session};

pub use connect::MailTrust;
use connect::{Endpoint, ImapSession, Security};
use inbound::{Converted, MailboxPosition, SentForm};

/// The adapter type.
pub const KIND: &str = "email";

/// Where the mailbox password is read from (§5.13: `adapter:<type>:<KEY>`).
pub const CREDENTIAL_PURPOSE: &str = "adapter:email:EMAIL_PASSWORD";

/// Seconds between checks on a server without IDLE, when `config.poll_interval` is absent.
pub const DEFAULT_POLL_INTERVAL_SECS: u64 = 60;

/// How long one IDLE lasts before it is re-issued (RFC 2177: servers may drop it after 30
/// minutes).
pub const IDLE_RENEW: Duration = Duration::from_secs(20 * 60);

/// Bytes of a mail fetched beyond `limits.max_attachment_size` for its headers and text.
pub const TEXT_ALLOWANCE: u64 = 1024 * 1024;

const MAILBOX_FILE: &str = "mailbox.json";
/// Where attachments land in the agent's files (§11.4 `imported/{source}/`).
const ATTACHMENT_DIR: &str = "imported/email";
/// Forms remembered for answers; older ones are forgotten first.
const MAX_FORMS: usize = 500;

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or_default()
}

/// The validated `adapters.email.config`.
#[derive(Debug, Clone)]
struct EmailConfig {
    address: String,
    username: String,
    display_name: Option<String>,
    imap: Endpoint,
    smtp: Endpoint,
    mailbox: String,
    poll_interval: Duration,
}

impl EmailConfig {
    fn parse(settings: &AdapterSettings) -> Result<Self, AdapterError> {
        let bad = |message: String| AdapterError::Config {
            adapter: KIND.into(),
            message,
        };
        let text = |name: &str| -> Result<Option<String>, AdapterError> {
            match settings.config.get(name) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) if !s.trim().is_empty() => Ok(Some(s.trim().to_owned())),
                Some(other) => Err(bad(format!(
                    "config.{name} is a non-empty string, not {other}"
                ))),
            }
        };
        let address = text("address")?
            .ok_or_else(|| bad("config.address (the agent's email address) is required".into()))?;
        if lettre::Address::from_str(&address).is_err() {
            return Err(bad(format!(
                "config.address '{address}' is not an email address"
            )));
        }
        let endpoint = |prefix: &str,
                        host: Option<String>,
                        default_security: Security|
         -> Result<Endpoint, AdapterError> {
            let host = host.ok_or_else(|| bad(format!("config.{prefix}_host is required")))?;
            let security = match text(&format!("{prefix}_security"))? {
                None => default_security,
                Some(s) => Security::parse(&s).ok_or_else(|| {
                    bad(format!(
                        "config.{prefix}_security is tls, starttls or none, not '{s}'"
                    ))
                })?,
            };
            if security == Security::None && !connect::is_loopback_host(&host) {
                return Err(bad(format!(
                    "config.{prefix}_security none sends the password in the clear; it is allowed for a loopback host only, not '{host}' (use tls or starttls)"
                )));
            }
            let default_port = match (prefix, security) {
                ("imap", Security::Tls) => 993,
                ("imap", _) => 143,
                (_, Security::Tls) => 465,
                (_, Security::StartTls) => 587,
                (_, Security::None) => 25,
            };
            let port = match settings.config.get(&format!("{prefix}_port")) {
                None | Some(Value::Null) => default_port,
                Some(v) => v
                    .as_u64()
                    .and_then(|p| u16::try_from(p).ok())
                    .filter(|p| *p > 0)
                    .ok_or_else(|| {
                        bad(format!("config.{prefix}_port is a port number, not {v}"))
                    })?,
            };
            Ok(Endpoint {
                host,
                port,
                security,
            })
        };
        let imap_host = text("imap_host")?;
        let smtp_host = text("smtp_host")?.or_else(|| imap_host.clone());
        let imap = endpoint("imap", imap_host, Security::Tls)?;
        let smtp = endpoint("smtp", smtp_host, Security::StartTls)?;
        let poll_interval = match settings.config.get("poll_interval") {
            None | Some(Value::Null) => DEFAULT_POLL_INTERVAL_SECS,
            Some(v) => v
                .as_u64()
                .filter(|s| (1..=3600).contains(s))
                .ok_or_else(|| bad("config.poll_interval is 1 to 3600 seconds".into()))?,
        };
        Ok(EmailConfig {
            username: text("username")?.unwrap_or_else(|| address.clone()),
            display_name: text("display_name")?,
            mailbox: text("mailbox")?.unwrap_or_else(|| "INBOX".to_owned()),
            address: address.to_lowercase(),
            imap,
            smtp,
            poll_interval: Duration::from_secs(poll_interval),
        })
    }

    fn domain(&self) -> &str {
        self.address.rsplit('@').next().unwrap_or("localhost")
    }
}

/// The Email adapter of one agent.
pub struct EmailAdapter {
    settings: AdapterSettings,
    config: EmailConfig,
    password: Secret,
    trust: MailTrust,
    sink: Arc<dyn AdapterSink>,
    state: StateDir,
    // Serializes writes of forms.json (deliveries may run side by side).
    forms: FormMemory,
}

impl std::fmt::Debug for EmailAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmailAdapter")
            .field("config", &self.config)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

/// Builds the Email adapter for one agent: the password is required. The daemon's adapters
/// trust the system's roots.
pub(crate) async fn build(building: &Building<'_>) -> Result<Arc<dyn Adapter>, AdapterError> {
    let password = building.required_credential(CREDENTIAL_PURPOSE).await?;
    let adapter = EmailAdapter::new(
        building.settings,
        password,
        building.sink.clone(),
        MailTrust::System,
    )?;
    Ok(Arc::new(adapter))
}

fn sink_error(e: impl std::fmt::Display) -> AdapterError {
    AdapterError::Sink {
        adapter: KIND.into(),
        reason: e.to_string(),
    }
}

/// The FETCH responses for one UID.
async fn fetch_one(
    imap: &mut ImapSession,
    uid: u32,
    query: &str,
) -> Result<Vec<async_imap::types::Fetch>, AdapterError> {
    imap.uid_fetch(uid.to_string(), query)
        .await
        .map_err(|e| connect::imap_error("FETCH", e))?
        .try_collect::<Vec<_>>()
        .await
        .map_err(|e| connect::imap_error("FETCH", e))
}

impl EmailAdapter {
    /// The adapter for `settings` (validated here), logging in with `password` and trusting
    /// `trust`'s certificates for TLS.
    pub fn new(
        settings: &AdapterSettings,
        password: Secret,
        sink: Arc<dyn AdapterSink>,
        trust: MailTrust,
    ) -> Result<Self, AdapterError> {
        let config = EmailConfig::parse(settings)?;
        let file = sink.agent_file();
        Ok(EmailAdapter {
            settings: settings.clone(),
            config,
            password,
            trust,
            sink,
            state: StateDir::new(&file, KIND),
            forms: FormMemory::new(StateDir::new(&file, KIND), "forms", MAX_FORMS),
        })
    }

    fn refused(&self, reason: String) -> AdapterError {
        AdapterError::CredentialRefused {
            adapter: KIND.into(),
            purpose: CREDENTIAL_PURPOSE.into(),
            reason,
            file: self.sink.agent_file().display().to_string(),
        }
    }

    async fn imap(&self) -> Result<ImapSession, AdapterError> {
        connect::imap_login(
            &self.sink.egress_policy(),
            &self.config.imap,
            &self.config.username,
            self.password.expose(),
            &self.trust,
        )
        .await
        .map_err(|e| match e {
            Ok(reason) => self.refused(reason),
            Err(e) => e,
        })
    }

    /// The last UID stored of `validity`, if the state is of this mailbox and numbering.
    fn stored_uid(&self, validity: u32) -> Result<Option<u32>, AdapterError> {
        Ok(self.state.read_json(MAILBOX_FILE)?.and_then(|state| {
            let same = state.get("mailbox").and_then(Value::as_str) == Some(&self.config.mailbox)
                && state.get("uid_validity").and_then(Value::as_u64) == Some(u64::from(validity));
            same.then(|| state.get("last_uid").and_then(Value::as_u64))
                .flatten()
                .and_then(|uid| u32::try_from(uid).ok())
        }))
    }

    fn store_uid(&self, validity: u32, uid: u32) -> Result<(), AdapterError> {
        self.state.write_json(
            MAILBOX_FILE,
            &json!({ "mailbox": self.config.mailbox, "uid_validity": validity, "last_uid": uid }),
        )
    }

    async fn receive(&self, session: &Session) -> Result<(), AdapterError> {
        let mut imap = self.imap().await?;
        let selected = imap.select(&self.config.mailbox).await.map_err(|e| {
            connect::imap_error(&format!("opening mailbox {}", self.config.mailbox), e)
        })?;
        let validity = selected.uid_validity.unwrap_or(0);
        let idle = imap
            .capabilities()
            .await
            .map_err(|e| connect::imap_error("CAPABILITY", e))?
            .has_str("IDLE");
        session.running();
        let mut last = self.stored_uid(validity)?;
        if last.is_none() {
            // First start, or the server renumbered the mailbox: its unseen mail is new.
            let mut unseen: Vec<u32> = imap
                .uid_search("UNSEEN")
                .await
                .map_err(|e| connect::imap_error("SEARCH", e))?
                .into_iter()
                .collect();
            unseen.sort_unstable();
            for uid in unseen {
                if session.stop().is_stopped() {
                    return Ok(());
                }
                self.take(&mut imap, uid, validity).await?;
                self.store_uid(validity, uid)?;
            }
            let next = selected.uid_next.unwrap_or(1).saturating_sub(1);
            let done = self.stored_uid(validity)?.unwrap_or(0).max(next);
            self.store_uid(validity, done)?;
            last = Some(done);
        }
        let mut last = last.unwrap_or(0);
        loop {
            last = self.take_new(&mut imap, validity, last, session).await?;
            if idle {
                let mut handle = imap.idle();
                handle
                    .init()
                    .await
                    .map_err(|e| connect::imap_error("IDLE", e))?;
                let stopped = {
                    let (wait, _interrupt) = handle.wait_with_timeout(IDLE_RENEW);
                    tokio::select! {
                        () = session.stop().stopped() => true,
                        woke = wait => {
                            woke.map_err(|e| connect::imap_error("IDLE", e))?;
                            false
                        }
                    }
                };
                if stopped {
                    return Ok(());
                }
                imap = handle
                    .done()
                    .await
                    .map_err(|e| connect::imap_error("DONE", e))?;
            } else {
                tokio::select! {
                    () = session.stop().stopped() => return Ok(()),
                    () = tokio::time::sleep(self.config.poll_interval) => {}
                }
                imap.noop()
                    .await
                    .map_err(|e| connect::imap_error("NOOP", e))?;
            }
        }
    }

    /// Takes every mail above `last`; returns the new last UID.
    async fn take_new(
        &self,
        imap: &mut ImapSession,
        validity: u32,
        last: u32,
        session: &Session,
    ) -> Result<u32, AdapterError> {
        let query = format!("{}:*", last.saturating_add(1));
        let mut uids: Vec<u32> = imap
            .uid_fetch(&query, "(UID)")
            .await
            .map_err(|e| connect::imap_error("FETCH", e))?
            .try_collect::<Vec<_>>()
            .await
            .map_err(|e| connect::imap_error("FETCH", e))?
            .into_iter()
            .filter_map(|fetch| fetch.uid)
            // `n:*` names the highest UID even when it is below n.
            .filter(|uid| *uid > last)
            .collect();
        uids.sort_unstable();
        let mut last = last;
        for uid in uids {
            if session.stop().is_stopped() {
                break;
            }
            self.take(imap, uid, validity).await?;
            self.store_uid(validity, uid)?;
            last = uid;
        }
        Ok(last)
    }

    /// Fetches one mail, stores its attachments and its row (or drops it by the policy).
    async fn take(
        &self,
        imap: &mut ImapSession,
        uid: u32,
        validity: u32,
    ) -> Result<(), AdapterError> {
        let cap = self
            .settings
            .max_attachment_size
            .saturating_add(TEXT_ALLOWANCE)
            .min(u64::from(u32::MAX));
        let sized = fetch_one(imap, uid, "(UID RFC822.SIZE)").await?;
        let Some(size) = sized
            .iter()
            .find(|f| f.uid == Some(uid))
            .and_then(|f| f.size)
            .map(u64::from)
        else {
            // Expunged meanwhile: nothing to take.
            return Ok(());
        };
        let truncated = size > cap;
        let query = if truncated {
            format!("(UID BODY.PEEK[]<0.{cap}>)")
        } else {
            "(UID BODY.PEEK[])".to_owned()
        };
        let fetched = fetch_one(imap, uid, &query).await?;
        let Some(raw) = fetched
            .iter()
            .find(|f| f.uid == Some(uid))
            .and_then(|f| f.body())
        else {
            return Ok(());
        };
        let position = MailboxPosition {
            mailbox: &self.config.mailbox,
            uid,
            uid_validity: validity,
            size,
            truncated,
        };
        let sent_form = |id: &str| self.sent_form(id);
        match inbound::convert(
            raw,
            position,
            &self.settings,
            &self.config.address,
            now_ms(),
            &sent_form,
        ) {
            Converted::Dropped(reason) => {
                tracing::debug!(adapter = KIND, uid, reason, "mail not stored");
            }
            Converted::Message(mut message, files) => {
                for file in files {
                    let outcome = self
                        .sink
                        .write_file(
                            ATTACHMENT_DIR,
                            &file.filename,
                            file.bytes,
                            file.content_type,
                        )
                        .await;
                    if let Some(record) = message
                        .attachments
                        .get_mut(file.index)
                        .and_then(Value::as_object_mut)
                    {
                        match outcome {
                            Ok(path) => {
                                record.insert("transfer".into(), json!("imported"));
                                record.insert("path".into(), json!(path));
                            }
                            Err(e) => {
                                record.insert("transfer".into(), json!("failed"));
                                record.insert("reason".into(), json!(e.to_string()));
                            }
                        }
                    }
                }
                self.sink
                    .write_inbound(*message)
                    .await
                    .map_err(sink_error)?;
            }
        }
        Ok(())
    }

    fn sent_form(&self, message_id: &str) -> Option<SentForm> {
        let entry = self.forms.recall(message_id)?;
        let outbox_id = entry.get("outbox_id")?.as_str()?.to_owned();
        let form = Form::parse(entry.get("content")?.as_str()?, &outbox_id).ok()?;
        Some(SentForm { outbox_id, form })
    }

    async fn remember_form(
        &self,
        message_id: &str,
        message: &OutboundMessage,
    ) -> Result<(), AdapterError> {
        let entry = json!({ "outbox_id": message.outbox_id, "content": message.content });
        self.forms
            .remember(|_| vec![(message_id.to_owned(), entry)])
            .await
    }

    fn mailbox_of(&self, address: &str, name: Option<&str>) -> Result<Mailbox, AdapterError> {
        let address = lettre::Address::from_str(address.trim()).map_err(|e| {
            AdapterError::Invalid(format!("'{address}' is not an email address: {e}"))
        })?;
        Ok(Mailbox::new(name.map(str::to_owned), address))
    }

    /// The mail for `message`: its Message-ID and the formatted mail.
    fn compose(
        &self,
        message: &OutboundMessage,
    ) -> Result<(String, lettre::Message), AdapterError> {
        let (kind, id) = parse_recipient(&message.recipient).ok_or_else(|| {
            AdapterError::Invalid(format!(
                "'{}' is not an email:<address> recipient",
                message.recipient
            ))
        })?;
        if kind != KIND {
            return Err(AdapterError::Invalid(format!(
                "the email adapter cannot deliver to '{}'",
                message.recipient
            )));
        }
        let context = message.source_context.as_ref();
        let field = |name: &str| {
            context
                .and_then(|c| c.get(name))
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
        };
        let is_form = message.content_type.as_deref() == Some(FORM_CONTENT_TYPE);
        let form = is_form
            .then(|| Form::parse(&message.content, &message.outbox_id))
            .transpose()?;
        let body = match &form {
            Some(form) => questionnaire_text(form),
            None => message.content.clone(),
        };
        if body.trim().is_empty() {
            return Err(AdapterError::Invalid("an email needs some text".into()));
        }
        let subject = match (
            field("subject"),
            form.as_ref().and_then(|f| f.title.as_deref()),
        ) {
            (Some(subject), _) if subject.to_lowercase().starts_with("re:") => subject.to_owned(),
            (Some(subject), _) => format!("Re: {subject}"),
            (None, Some(title)) => title.to_owned(),
            (None, None) => format!(
                "Message from {}",
                self.config
                    .display_name
                    .as_deref()
                    .unwrap_or(&self.config.address)
            ),
        };
        let unique: String = message
            .outbox_id
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
            .take(64)
            .collect();
        let message_id = format!("<adf.{unique}.{}@{}>", now_ms(), self.config.domain());
        let mut builder = lettre::Message::builder()
            .from(self.mailbox_of(&self.config.address, self.config.display_name.as_deref())?)
            .to(self.mailbox_of(id, None)?)
            .subject(subject)
            .message_id(Some(message_id.clone()));
        if let Some(replied) = field("message_id") {
            builder = builder.in_reply_to(replied.to_owned());
        }
        let references: Vec<&str> = context
            .and_then(|c| c.get("references"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        if !references.is_empty() {
            builder = builder.references(references.join(" "));
        }
        let mail = builder
            .header(ContentType::TEXT_PLAIN)
            .body(body)
            .map_err(|e| AdapterError::Invalid(format!("cannot compose the mail: {e}")))?;
        Ok((message_id, mail))
    }

    fn hello(&self) -> ClientId {
        ClientId::Domain(self.config.domain().to_owned())
    }

    /// An SMTP connection, authenticated when the server offers AUTH. Returns whether it did.
    async fn smtp(
        &self,
    ) -> Result<(lettre::transport::smtp::client::AsyncSmtpConnection, bool), AdapterError> {
        let mut connection = connect::smtp_connect(
            &self.sink.egress_policy(),
            &self.config.smtp,
            &self.hello(),
            &self.trust,
        )
        .await?;
        let mechanisms = [Mechanism::Plain, Mechanism::Login];
        let offered = connection
            .server_info()
            .get_auth_mechanism(&mechanisms)
            .is_some();
        if offered {
            let credentials = Credentials::new(
                self.config.username.clone(),
                self.password.expose().to_owned(),
            );
            connection.auth(&mechanisms, &credentials).await.map_err(
                |e| match connect::smtp_code(&e) {
                    // A permanent refusal is the credential's; a temporary one (454) or a
                    // dropped connection may pass on a retry.
                    Some(code) if code >= 500 => {
                        self.refused(format!("SMTP AUTH refused: {}", connect::smtp_reason(&e)))
                    }
                    _ => AdapterError::Transport {
                        adapter: KIND.into(),
                        reason: format!("SMTP AUTH: {}", connect::smtp_reason(&e)),
                    },
                },
            )?;
        }
        Ok((connection, offered))
    }

    async fn send(&self, message: &OutboundMessage) -> Result<Delivered, AdapterError> {
        let (message_id, mail) = self.compose(message)?;
        let (mut connection, _) = self.smtp().await?;
        let sent = connection.send(mail.envelope(), &mail.formatted()).await;
        // The mail is accepted or refused by now; a failed QUIT changes neither.
        let _quit = connection.quit().await;
        // A reply code is the server's refusal (a failed row with its words); without one the
        // connection failed mid-way.
        let response = sent.map_err(|e| match connect::smtp_code(&e) {
            Some(status) => AdapterError::Platform {
                adapter: KIND.into(),
                status,
                reason: connect::smtp_reason(&e),
            },
            None => AdapterError::Transport {
                adapter: KIND.into(),
                reason: format!("SMTP: {}", connect::smtp_reason(&e)),
            },
        })?;
        if message.content_type.as_deref() == Some(FORM_CONTENT_TYPE) {
            self.remember_form(&message_id, message).await?;
        }
        Ok(Delivered {
            platform_message_ids: vec![message_id],
            status_code: response.code().to_string().parse().unwrap_or(250),
        })
    }

    async fn mailbox_status(&self) -> Result<Value, AdapterError> {
        let mut imap = self.imap().await?;
        let status = imap
            .status(&self.config.mailbox, "(MESSAGES UNSEEN)")
            .await
            .map_err(|e| connect::imap_error("STATUS", e))?;
        // Logging out politely; the answer is already here.
        let _logout = imap.logout().await;
        Ok(json!({
            "name": self.config.mailbox,
            "messages": status.exists,
            "unseen": status.unseen,
        }))
    }
}

impl Adapter for EmailAdapter {
    fn kind(&self) -> &'static str {
        KIND
    }

    fn run<'a>(&'a self, session: &'a Session) -> BoxFuture<'a, Result<(), AdapterError>> {
        Box::pin(self.receive(session))
    }

    fn deliver<'a>(
        &'a self,
        message: &'a OutboundMessage,
    ) -> BoxFuture<'a, Result<Delivered, AdapterError>> {
        Box::pin(self.send(message))
    }

    fn chat_info<'a>(
        &'a self,
        chat_id: &'a str,
        _limit: u32,
    ) -> BoxFuture<'a, Result<Value, AdapterError>> {
        Box::pin(async move {
            let address = chat_id.trim().to_lowercase();
            if lettre::Address::from_str(&address).is_err() {
                return Err(AdapterError::Invalid(format!(
                    "an email chat is an address, not '{chat_id}'"
                )));
            }
            let own = address == self.config.address;
            let mailbox = if own {
                Some(self.mailbox_status().await?)
            } else {
                None
            };
            Ok(json!({
                "supported": true,
                "adapter": KIND,
                "chat": {
                    "id": address,
                    "type": if own { "mailbox" } else { "address" },
                    "title": if own { self.config.display_name.clone() } else { None },
                },
                "mailbox": mailbox,
                // A mail conversation has no member list; its people are the To/Cc of each mail.
                "member_count": null,
                "messages": { "supported": false, "reason": "the email adapter does not search the mailbox for a conversation's history; the inbox rows hold what arrived" },
            }))
        })
    }

    fn test_credential(&self) -> BoxFuture<'_, Result<Value, AdapterError>> {
        Box::pin(async move {
            let mut imap = self.imap().await?;
            // The login is what was tested; a failed LOGOUT changes nothing.
            let _logout = imap.logout().await;
            let (mut smtp, authenticated) = self.smtp().await?;
            let _quit = smtp.quit().await;
            let endpoint = |e: &Endpoint| json!({ "host": e.host, "port": e.port, "security": e.security.as_str() });
            Ok(json!({
                "ok": true,
                "adapter": KIND,
                "address": self.config.address,
                "imap": { "server": endpoint(&self.config.imap), "login": "ok" },
                "smtp": {
                    "server": endpoint(&self.config.smtp),
                    "auth": if authenticated { "ok" } else { "not offered by the server" },
                },
            }))
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn parse(config: Value) -> Result<EmailConfig, AdapterError> {
        EmailConfig::parse(&AdapterSettings::parse(KIND, &json!({ "config": config })).unwrap())
    }

    #[test]
    fn config_defaults_follow_the_security_and_plain_text_is_for_loopback_only() {
        let c =
            parse(json!({"address": "Bot@Example.com", "imap_host": "mail.example.com"})).unwrap();
        assert_eq!(c.address, "bot@example.com");
        assert_eq!(c.username, "Bot@Example.com");
        assert_eq!((c.imap.port, c.imap.security), (993, Security::Tls));
        assert_eq!(c.smtp.host, "mail.example.com");
        assert_eq!((c.smtp.port, c.smtp.security), (587, Security::StartTls));
        assert_eq!(c.mailbox, "INBOX");
        let err = parse(
            json!({"address": "a@b.c", "imap_host": "mail.example.com", "imap_security": "none"}),
        )
        .unwrap_err();
        assert!(err.to_string().contains("loopback"), "{err}");
        assert!(parse(json!({"address": "a@b.c", "imap_host": "127.0.0.1", "imap_security": "none", "smtp_security": "none"})).is_ok());
        let err = parse(json!({"imap_host": "x"})).unwrap_err();
        assert!(err.to_string().contains("config.address"), "{err}");
        let err = parse(json!({"address": "a@b.c", "imap_host": "x", "smtp_security": "ssl"}))
            .unwrap_err();
        assert!(err.to_string().contains("tls, starttls or none"), "{err}");
    }
}
