//! Real mail servers (IMAP and SMTP) on loopback for the email adapter's tests.
//!
//! [`MailServers::start`] runs a private Dovecot (IMAP, LMTP, the SASL auth service) and a
//! private Postfix (SMTP, with AUTH through Dovecot, delivering `example.test` mail to Dovecot
//! over LMTP) per test, each with its own configuration, queue, mail store and logs under a
//! temporary directory and listening on 127.0.0.1 ephemeral ports only. Users live in a
//! passwd-file. Nothing is ever relayed off the machine: Postfix's only transports are the
//! LMTP one to this Dovecot and an `error` one for every other domain. Dropping the value
//! stops both servers and removes the directory.
//!
//! The servers are Debian's packages, installed by [`SETUP_SCRIPT`]; a test that finds them
//! missing fails with a message naming it (the servers must run as root, like the CI's setup).

use std::net::TcpListener as StdListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// The script that installs the mail servers.
pub const SETUP_SCRIPT: &str = "scripts/setup.d/45-mail-servers.sh";

/// The mail domain the servers receive for.
pub const DOMAIN: &str = "example.test";

const DOVECOT: &str = "/usr/sbin/dovecot";
const POSTFIX: &str = "/usr/sbin/postfix";

/// A private Dovecot + Postfix pair on 127.0.0.1.
#[derive(Debug)]
pub struct MailServers {
    dir: tempfile::TempDir,
    dovecot: Child,
    postfix: Child,
    imap_port: u16,
    smtp_port: u16,
    tls: Option<Tls>,
}

/// The TLS side of servers started with [`MailServers::start_tls`].
#[derive(Debug)]
struct Tls {
    imaps_port: u16,
    smtps_port: u16,
    ca_der: Vec<u8>,
}

fn free_ports(n: usize) -> Vec<u16> {
    // Held together, so the n ports differ; released just before the servers bind them.
    let listeners: Vec<StdListener> = (0..n)
        .map(|_| match StdListener::bind("127.0.0.1:0") {
            Ok(listener) => listener,
            Err(e) => panic!("cannot reserve a loopback port: {e}"),
        })
        .collect();
    listeners
        .iter()
        .map(|l| match l.local_addr() {
            Ok(addr) => addr.port(),
            Err(e) => panic!("no local address: {e}"),
        })
        .collect()
}

fn write(path: &Path, text: &str) {
    if let Err(e) = std::fs::write(path, text) {
        panic!("cannot write {}: {e}", path.display());
    }
}

fn run(command: &mut Command, what: &str) {
    match command.output() {
        Ok(out) if out.status.success() => {}
        Ok(out) => panic!(
            "{what} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => panic!("cannot run {what}: {e}"),
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}

impl MailServers {
    /// Starts both servers with `users` (`(local part, password)` at [`DOMAIN`]) and waits until
    /// they accept connections. Panics, naming [`SETUP_SCRIPT`], when the servers are missing.
    pub async fn start(users: &[(&str, &str)]) -> MailServers {
        Self::start_with(users, false).await
    }

    /// Like [`start`](Self::start), and TLS too: STARTTLS on the IMAP and SMTP ports, implicit
    /// TLS on [`imaps_port`](Self::imaps_port) and [`smtps_port`](Self::smtps_port), with a
    /// certificate for `127.0.0.1` issued by a test CA made for this instance
    /// ([`ca_certificate_der`](Self::ca_certificate_der)).
    pub async fn start_tls(users: &[(&str, &str)]) -> MailServers {
        Self::start_with(users, true).await
    }

    async fn start_with(users: &[(&str, &str)], tls: bool) -> MailServers {
        for binary in [DOVECOT, POSTFIX] {
            assert!(
                Path::new(binary).exists(),
                "{binary} is not installed: the email tests need Debian's dovecot-imapd, dovecot-lmtpd and postfix; run {SETUP_SCRIPT} (as root; .ci/run runs scripts/setup.d)"
            );
        }
        assert!(
            is_root(),
            "the email tests start private Dovecot and Postfix instances, which must run as root (as {SETUP_SCRIPT} and .ci/run do)"
        );
        let dir = prepare_dir(users);
        let d = dir.path().to_owned();
        let ports = free_ports(6);
        let (imap_port, lmtp_port, auth_port, smtp_port) = (ports[0], ports[1], ports[2], ports[3]);
        let tls = tls.then(|| Tls {
            imaps_port: ports[4],
            smtps_port: ports[5],
            ca_der: issue_certificates(&d),
        });
        write_configs(&d, users, &ports, tls.as_ref());

        let dovecot = match Command::new(DOVECOT)
            .arg("-F")
            .arg("-c")
            .arg(d.join("dovecot.conf"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
        {
            Ok(child) => child,
            Err(e) => panic!("cannot start dovecot: {e}"),
        };
        let postfix = match Command::new(POSTFIX)
            .arg("-c")
            .arg(d.join("postfix"))
            .arg("start-fg")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
        {
            Ok(child) => child,
            Err(e) => panic!("cannot start postfix: {e}"),
        };
        let servers = MailServers {
            dir,
            dovecot,
            postfix,
            imap_port,
            smtp_port,
            tls,
        };
        let tls_ports = servers.tls.as_ref().map(|t| {
            [
                (t.imaps_port, "dovecot IMAPS"),
                (t.smtps_port, "postfix SMTPS"),
            ]
        });
        for (port, what) in tls_ports.into_iter().flatten().chain([
            (imap_port, "dovecot IMAP"),
            (lmtp_port, "dovecot LMTP"),
            (auth_port, "dovecot auth"),
            (smtp_port, "postfix SMTP"),
        ]) {
            servers.wait_listening(port, what).await;
        }
        servers
    }

    async fn wait_listening(&self, port: u16, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{what} did not listen on 127.0.0.1:{port} within 20 s; logs:\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The IMAP port (plain text, loopback).
    pub fn imap_port(&self) -> u16 {
        self.imap_port
    }

    /// The SMTP port (plain text with AUTH, loopback).
    pub fn smtp_port(&self) -> u16 {
        self.smtp_port
    }

    /// The implicit-TLS IMAP port, for servers started with [`start_tls`](Self::start_tls).
    pub fn imaps_port(&self) -> Option<u16> {
        self.tls.as_ref().map(|t| t.imaps_port)
    }

    /// The implicit-TLS SMTP port, for servers started with [`start_tls`](Self::start_tls).
    pub fn smtps_port(&self) -> Option<u16> {
        self.tls.as_ref().map(|t| t.smtps_port)
    }

    /// The test CA's certificate (DER) that issued the servers' certificate, for servers
    /// started with [`start_tls`](Self::start_tls).
    pub fn ca_certificate_der(&self) -> Option<Vec<u8>> {
        self.tls.as_ref().map(|t| t.ca_der.clone())
    }

    /// `user@example.test`.
    pub fn address(user: &str) -> String {
        format!("{user}@{DOMAIN}")
    }

    /// Both servers' logs, for failure messages.
    pub fn logs(&self) -> String {
        let read =
            |name: &str| std::fs::read_to_string(self.dir.path().join(name)).unwrap_or_default();
        format!(
            "--- dovecot ---\n{}\n--- postfix ---\n{}",
            read("dovecot.log"),
            read("postfix.log")
        )
    }

    /// Submits `raw` (headers and body, `\n` or `\r\n` lines) from `from` to `to` over SMTP
    /// without authentication (the servers accept mail for their own domain), as another
    /// mail server would. `Err` is the server's refusal.
    pub async fn send(&self, from: &str, to: &str, raw: &str) -> Result<(), String> {
        let stream = TcpStream::connect(("127.0.0.1", self.smtp_port))
            .await
            .map_err(|e| format!("cannot connect to SMTP: {e}"))?;
        let (read, mut write) = stream.into_split();
        let mut lines = BufReader::new(read).lines();
        let mut reply = async || -> Result<String, String> {
            let mut text = String::new();
            loop {
                let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
                    .await
                    .map_err(|_| "SMTP reply timed out".to_owned())?
                    .map_err(|e| e.to_string())?
                    .ok_or("SMTP connection closed")?;
                text.push_str(&line);
                text.push('\n');
                if line.as_bytes().get(3) != Some(&b'-') {
                    return if line.starts_with('2') || line.starts_with('3') {
                        Ok(text)
                    } else {
                        Err(text)
                    };
                }
            }
        };
        reply().await?;
        let mut body = String::new();
        for line in raw.replace("\r\n", "\n").split('\n') {
            if line.starts_with('.') {
                body.push('.');
            }
            body.push_str(line);
            body.push_str("\r\n");
        }
        for command in [
            format!("EHLO client.{DOMAIN}\r\n"),
            format!("MAIL FROM:<{from}>\r\n"),
            format!("RCPT TO:<{to}>\r\n"),
            "DATA\r\n".to_owned(),
            format!("{body}.\r\n"),
            "QUIT\r\n".to_owned(),
        ] {
            write
                .write_all(command.as_bytes())
                .await
                .map_err(|e| e.to_string())?;
            reply().await?;
        }
        Ok(())
    }

    /// The mails delivered to `address`'s inbox so far (its Maildir), oldest first.
    pub fn delivered(&self, address: &str) -> Vec<String> {
        let maildir = self.dir.path().join("mail").join(address);
        let mut files: Vec<(std::time::SystemTime, PathBuf)> = ["new", "cur"]
            .iter()
            .flat_map(|sub| std::fs::read_dir(maildir.join(sub)).into_iter().flatten())
            .flatten()
            .filter_map(|entry| {
                let modified = entry.metadata().ok()?.modified().ok()?;
                Some((modified, entry.path()))
            })
            .collect();
        files.sort();
        files
            .into_iter()
            .filter_map(|(_, path)| std::fs::read_to_string(path).ok())
            .collect()
    }

    /// Waits (at most 20 s) until `address` has at least `count` mails, and returns them.
    pub async fn wait_delivered(&self, address: &str, count: usize) -> Vec<String> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let mails = self.delivered(address);
            if mails.len() >= count {
                return mails;
            }
            assert!(
                Instant::now() < deadline,
                "{address} has {} mails, not {count}, after 20 s; logs:\n{}",
                mails.len(),
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Stops `child` with SIGTERM and waits up to 5 s, then kills it.
fn terminate(child: &mut Child) {
    let _signalled = Command::new("kill")
        .arg(child.id().to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if matches!(child.try_wait(), Ok(Some(_))) {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _killed = child.kill();
    let _reaped = child.wait();
}

impl Drop for MailServers {
    fn drop(&mut self) {
        // `abort` stops the master and every Postfix process at once (no queue flush).
        let _stopped = Command::new(POSTFIX)
            .arg("-c")
            .arg(self.dir.path().join("postfix"))
            .arg("abort")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        terminate(&mut self.postfix);
        terminate(&mut self.dovecot);
    }
}

/// The instance's directory: writable by the servers' unprivileged users where they write,
/// with the users' passwd-file.
fn prepare_dir(users: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = match tempfile::Builder::new().prefix("adf-mail-").tempdir() {
        Ok(dir) => dir,
        Err(e) => panic!("no temporary directory: {e}"),
    };
    let d = dir.path().to_owned();
    // The servers' unprivileged users (mail, postfix) must reach their parts of it.
    run(Command::new("chmod").arg("755").arg(&d), "chmod");
    for sub in ["run", "state", "mail", "postfix", "queue", "data"] {
        if let Err(e) = std::fs::create_dir_all(d.join(sub)) {
            panic!("cannot create {sub}: {e}");
        }
    }
    run(
        Command::new("chown").arg("mail:mail").arg(d.join("mail")),
        "chown mail",
    );
    run(
        Command::new("chown").arg("postfix").arg(d.join("data")),
        "chown data",
    );
    let passwd: String = users
        .iter()
        .map(|(user, password)| format!("{user}@{DOMAIN}:{{PLAIN}}{password}::::::\n"))
        .collect();
    write(&d.join("users"), &passwd);
    dir
}

/// Writes Dovecot's and Postfix's configuration for `ports` (IMAP, LMTP, auth, SMTP) and,
/// with `tls`, the TLS listeners.
fn write_configs(d: &Path, users: &[(&str, &str)], ports: &[u16], tls: Option<&Tls>) {
    let (imap_port, lmtp_port, auth_port, smtp_port) = (ports[0], ports[1], ports[2], ports[3]);
    let mut dovecot_conf = dovecot_config(d, imap_port, lmtp_port, auth_port);
    if let Some(tls) = tls {
        dovecot_conf = dovecot_conf
                .replace(
                    "ssl = no\n",
                    &format!(
                        "ssl = yes\nssl_cert = <{dir}/server.pem\nssl_key = <{dir}/server.key\nssl_dh = </usr/share/dovecot/dh.pem\n",
                        dir = d.display()
                    ),
                )
                .replace(
                    "  inet_listener imaps {\n    port = 0\n",
                    &format!(
                        "  inet_listener imaps {{\n    address = 127.0.0.1\n    port = {}\n",
                        tls.imaps_port
                    ),
                );
    }
    write(&d.join("dovecot.conf"), &dovecot_conf);
    let mailboxes: Vec<String> = users
        .iter()
        .map(|(user, _)| format!("{user}@{DOMAIN}=ok"))
        .collect();
    write(
        &d.join("postfix/main.cf"),
        &postfix_main(d, lmtp_port, auth_port, &mailboxes.join(", ")),
    );
    let mut master = postfix_master(smtp_port);
    if let Some(tls) = tls {
        let mut main = std::fs::read_to_string(d.join("postfix/main.cf")).unwrap_or_default();
        main.push_str(&format!(
                "smtpd_tls_cert_file = {dir}/server.pem\nsmtpd_tls_key_file = {dir}/server.key\nsmtpd_tls_security_level = may\n",
                dir = d.display()
            ));
        write(&d.join("postfix/main.cf"), &main);
        master.push_str(&format!(
            "127.0.0.1:{} inet n - n - - smtpd -o smtpd_tls_wrappermode=yes\n",
            tls.smtps_port
        ));
    }
    write(&d.join("postfix/master.cf"), &master);
}

/// Makes a test CA and a certificate for `127.0.0.1` it issued (`server.pem`, `server.key`
/// in `d`) with openssl; returns the CA certificate as DER.
fn issue_certificates(d: &Path) -> Vec<u8> {
    let openssl = |args: &[&str]| {
        run(
            Command::new("openssl").current_dir(d).args(args),
            &format!("openssl {}", args.first().copied().unwrap_or_default()),
        );
    };
    write(
        &d.join("server.ext"),
        "basicConstraints = critical, CA:FALSE\nkeyUsage = critical, digitalSignature, keyEncipherment\nextendedKeyUsage = serverAuth\nsubjectAltName = IP:127.0.0.1, DNS:localhost\n",
    );
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=adf test mail CA",
    ]);
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=127.0.0.1",
    ]);
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "server.ext",
    ]);
    openssl(&["x509", "-in", "ca.pem", "-outform", "DER", "-out", "ca.der"]);
    match std::fs::read(d.join("ca.der")) {
        Ok(der) => der,
        Err(e) => panic!("cannot read the test CA: {e}"),
    }
}

fn dovecot_config(d: &Path, imap: u16, lmtp: u16, auth: u16) -> String {
    let d = d.display();
    format!(
        r#"base_dir = {d}/run
state_dir = {d}/state
log_path = {d}/dovecot.log
protocols = imap lmtp
listen = 127.0.0.1
ssl = no
disable_plaintext_auth = no
auth_mechanisms = plain login
auth_failure_delay = 0
mail_location = maildir:{d}/mail/%u
first_valid_uid = 1
default_internal_user = dovecot
default_login_user = dovenull
passdb {{
  driver = passwd-file
  args = scheme=PLAIN username_format=%u {d}/users
}}
userdb {{
  driver = static
  args = uid=mail gid=mail home={d}/mail/%u
}}
service imap-login {{
  inet_listener imap {{
    address = 127.0.0.1
    port = {imap}
  }}
  inet_listener imaps {{
    port = 0
  }}
}}
service lmtp {{
  inet_listener lmtp {{
    address = 127.0.0.1
    port = {lmtp}
  }}
  unix_listener lmtp {{
    mode = 0
  }}
}}
service auth {{
  inet_listener {{
    address = 127.0.0.1
    port = {auth}
  }}
}}
protocol lmtp {{
  postmaster_address = postmaster@{DOMAIN}
}}
"#
    )
}

fn postfix_main(d: &Path, lmtp: u16, auth: u16, mailboxes: &str) -> String {
    let d = d.display();
    format!(
        r#"compatibility_level = 3.6
queue_directory = {d}/queue
data_directory = {d}/data
command_directory = /usr/sbin
daemon_directory = /usr/lib/postfix/sbin
meta_directory = /etc/postfix
shlib_directory = /usr/lib/postfix
mail_owner = postfix
setgid_group = postdrop
myhostname = mail.{DOMAIN}
mydomain = {DOMAIN}
myorigin = {DOMAIN}
mydestination =
inet_interfaces = 127.0.0.1
inet_protocols = ipv4
alias_maps =
alias_database =
local_recipient_maps =
relayhost =
default_transport = error:this test server delivers to {DOMAIN} only
virtual_mailbox_domains = {DOMAIN}
virtual_mailbox_maps = inline:{{ {mailboxes} }}
virtual_transport = lmtp:inet:127.0.0.1:{lmtp}
smtpd_sasl_auth_enable = yes
smtpd_sasl_type = dovecot
smtpd_sasl_path = inet:127.0.0.1:{auth}
smtpd_relay_restrictions = permit_sasl_authenticated, reject_unauth_destination
smtputf8_enable = no
maillog_file_prefixes = {d}
maillog_file = {d}/postfix.log
biff = no
"#
    )
}

fn postfix_master(smtp: u16) -> String {
    format!(
        "127.0.0.1:{smtp} inet n - n - - smtpd
pickup    unix  n       -       n       60      1       pickup
cleanup   unix  n       -       n       -       0       cleanup
qmgr      unix  n       -       n       300     1       qmgr
tlsmgr    unix  -       -       n       1000?   1       tlsmgr
rewrite   unix  -       -       n       -       -       trivial-rewrite
bounce    unix  -       -       n       -       0       bounce
defer     unix  -       -       n       -       0       bounce
trace     unix  -       -       n       -       0       bounce
verify    unix  -       -       n       -       1       verify
flush     unix  n       -       n       1000?   0       flush
proxymap  unix  -       -       n       -       -       proxymap
smtp      unix  -       -       n       -       -       smtp
relay     unix  -       -       n       -       -       smtp
showq     unix  n       -       n       -       -       showq
error     unix  -       -       n       -       -       error
retry     unix  -       -       n       -       -       error
discard   unix  -       -       n       -       -       discard
lmtp      unix  -       -       n       -       -       lmtp
anvil     unix  -       -       n       -       1       anvil
scache    unix  -       -       n       -       1       scache
postlog   unix-dgram n  -       n       -       1       postlogd
"
    )
}
