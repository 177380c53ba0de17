//! The §5.6 decisions, made by the policy alone: nothing here dials anything.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

use adf_egress::{EgressErrorKind, Lookup, Pins, Policy, Url, is_public_mesh_route};
use futures::future::BoxFuture;

/// A resolver table: names answer with fixed addresses, nothing else resolves.
struct Table(HashMap<&'static str, Vec<IpAddr>>);

impl Lookup for Table {
    fn lookup(&self, host: &str, _port: u16) -> BoxFuture<'static, std::io::Result<Vec<IpAddr>>> {
        let found = self.0.get(host).cloned();
        Box::pin(async move {
            found.ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "no such name"))
        })
    }
}

fn table(entries: &[(&'static str, &[&str])]) -> Table {
    Table(
        entries
            .iter()
            .map(|(name, ips)| (*name, ips.iter().map(|ip| ip.parse().unwrap()).collect()))
            .collect(),
    )
}

fn url(text: &str) -> Url {
    Url::parse(text).unwrap()
}

fn policy(allow_local: bool) -> Policy {
    Policy {
        allow_local,
        ..Policy::default()
    }
}

/// A port no control API of this test binary uses: a listener's, held for the test.
fn fresh_port() -> (std::net::TcpListener, u16) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    (listener, port)
}

/// A port registered as a control API for the life of the process (`protect_control_api` has
/// no undo): its listener stays bound as long, or another test's server could draw the port
/// and be refused.
fn protected_port() -> u16 {
    let (held, port) = fresh_port();
    adf_egress::protect_control_api(SocketAddr::from(([127, 0, 0, 1], port)));
    Box::leak(Box::new(held));
    port
}

fn refused(policy: &Policy, address: &str) -> bool {
    let ip: IpAddr = address.parse().unwrap();
    policy
        .check_address(ip, 80, "GET", &url("http://example.invalid/"))
        .is_err()
}

#[test]
fn srv_21_srv_24_srv_25_address_rules_in_order() {
    // Rule 1 holds with the flag on.
    for a in [
        "169.254.169.254",
        "169.254.0.1",
        "fe80::1",
        "::ffff:169.254.169.254",
        "64:ff9b::a9fe:a9fe",
        "fd00:ec2::254",
        "100.100.100.200",
    ] {
        assert!(refused(&policy(true), a), "{a}");
        assert!(refused(&policy(false), a), "{a}");
    }
    // Rule 5 with the flag off; rule 4 with it on.
    for a in [
        "10.0.0.1",
        "172.16.0.1",
        "172.31.255.255",
        "192.168.1.1",
        "100.64.0.1",
        "0.0.0.0",
        "::",
        "224.0.0.1",
        "240.0.0.1",
        "255.255.255.255",
        "192.0.2.1",
        "fc00::1",
        "fd12::1",
        "ff02::1",
        "2001:db8::1",
        "::ffff:10.0.0.1",
        "::ffff:192.168.0.1",
    ] {
        assert!(refused(&policy(false), a), "{a}");
        assert!(!refused(&policy(true), a), "{a}");
    }
    for a in [
        "127.0.0.1",
        "127.8.9.10",
        "::1",
        "93.184.216.34",
        "172.32.0.1",
        "2606:4700::1",
    ] {
        assert!(!refused(&policy(false), a), "{a}");
    }
}

#[test]
fn srv_23_served_origin_allows_its_prefix_only() {
    let served = Policy {
        served_origins: vec!["http://10.1.2.3:8080/agents/me/".into()],
        ..Policy::default()
    };
    let ip: IpAddr = "10.1.2.3".parse().unwrap();
    assert!(
        served
            .check_address(ip, 8080, "GET", &url("http://10.1.2.3:8080/agents/me/card"))
            .is_ok()
    );
    assert!(
        served
            .check_address(
                ip,
                8080,
                "GET",
                &url("http://10.1.2.3:8080/agents/other/card")
            )
            .is_err()
    );
}

#[tokio::test]
async fn srv_19_every_resolved_address_is_checked_and_the_admitted_ones_pinned() {
    let names = table(&[
        ("rebind.test", &["10.0.0.1"]),
        ("mixed.test", &["127.0.0.1", "10.0.0.1"]),
        ("metadata.test", &["169.254.169.254"]),
        ("loop.test", &["127.0.0.1", "::1"]),
    ]);
    let pins = Pins::default();
    for host in ["rebind.test", "mixed.test", "metadata.test"] {
        let error = policy(false)
            .admit("GET", &url(&format!("http://{host}:81/")), &names, &pins)
            .await
            .unwrap_err();
        assert_eq!(error.kind, EgressErrorKind::Refused, "{host}: {error}");
        assert!(error.to_string().contains("resolved to"), "{error}");
        assert_eq!(pins.get(host), None, "a refused name is never pinned");
    }
    let admitted = policy(false)
        .admit("GET", &url("http://LOOP.test:81/x"), &names, &pins)
        .await
        .unwrap();
    let expected: Vec<SocketAddr> =
        vec!["127.0.0.1:81".parse().unwrap(), "[::1]:81".parse().unwrap()];
    assert_eq!(admitted, expected);
    assert_eq!(pins.get("loop.test"), Some(expected));
}

#[tokio::test]
async fn srv_24_an_allowed_private_address_is_never_dialed_by_a_test_build() {
    let pins = Pins::default();
    let allowed = policy(true)
        .admit("GET", &url("http://10.255.255.1:9/"), &table(&[]), &pins)
        .await
        .unwrap_err();
    // The policy said yes (rule 4); only the test build's dial guard said no.
    assert_eq!(allowed.kind, EgressErrorKind::OffMachineInTest, "{allowed}");
    assert!(allowed.reason.contains("10.255.255.1:9"), "{allowed}");
    let refused = policy(false)
        .admit("GET", &url("http://10.255.255.1:9/"), &table(&[]), &pins)
        .await
        .unwrap_err();
    assert_eq!(refused.kind, EgressErrorKind::Refused, "{refused}");
}

#[tokio::test]
async fn srv_27_only_web_schemes_are_destinations() {
    for text in [
        "file:///etc/passwd",
        "ftp://127.0.0.1/",
        "gopher://127.0.0.1/",
    ] {
        let error = policy(true)
            .admit("GET", &url(text), &table(&[]), &Pins::default())
            .await
            .unwrap_err();
        assert_eq!(error.kind, EgressErrorKind::Invalid, "{text}");
    }
}

#[tokio::test]
async fn srv_22_a_control_api_is_refused_on_every_local_spelling_but_its_mesh_routes() {
    let port = protected_port();
    let names = table(&[("localhost", &["127.0.0.1", "::1"])]);
    let permissive = policy(true);
    for (method, text) in [
        ("POST", format!("http://127.0.0.1:{port}/agents/other/stop")),
        ("GET", format!("http://localhost:{port}/agents")),
        ("GET", format!("http://0.0.0.0:{port}/agents")),
        ("GET", format!("http://[::ffff:127.0.0.1]:{port}/agents")),
        ("GET", format!("http://[::1]:{port}/")),
        ("GET", format!("http://127.8.9.10:{port}/agents/x/config")),
        // The owner's inbox listing shares the inbox path; only POST is the mesh route.
        ("GET", format!("http://127.0.0.1:{port}/agents/x/inbox")),
        (
            "POST",
            format!("http://127.0.0.1:{port}/agents/x/inbox?then=/stop"),
        ),
        ("POST", format!("http://127.0.0.1:{port}/agents/x/inbox/")),
        ("POST", format!("http://127.0.0.1:{port}/agents/x/y/inbox")),
        (
            "POST",
            format!("http://127.0.0.1:{port}/agents/%2e%2e/inbox"),
        ),
        (
            "POST",
            format!("http://127.0.0.1:{port}/agents/a%2Fb/inbox"),
        ),
        ("POST", format!("http://127.0.0.1:{port}//agents/x/inbox")),
    ] {
        let error = permissive
            .admit(method, &url(&text), &names, &Pins::default())
            .await
            .unwrap_err();
        assert_eq!(
            error.kind,
            EgressErrorKind::Refused,
            "{method} {text}: {error}"
        );
        assert!(
            error.reason.contains("control API"),
            "{method} {text}: {error}"
        );
    }
    for (method, text) in [
        (
            "POST",
            format!("http://127.0.0.1:{port}/agents/other/inbox"),
        ),
        (
            "post",
            format!("http://localhost:{port}/agents/did:key:z6Mk/inbox"),
        ),
        ("GET", format!("http://127.0.0.1:{port}/agents/other/card")),
        (
            "GET",
            format!("http://127.0.0.1:{port}/agents/other/health"),
        ),
    ] {
        let admitted = policy(false)
            .admit(method, &url(&text), &names, &Pins::default())
            .await;
        assert!(admitted.is_ok(), "{method} {text}: {admitted:?}");
    }
}

#[test]
fn public_mesh_routes_are_exact() {
    assert!(is_public_mesh_route(
        "POST",
        &url("http://h/agents/a/inbox")
    ));
    assert!(is_public_mesh_route("GET", &url("http://h/agents/a/card")));
    assert!(!is_public_mesh_route(
        "GET",
        &url("http://h/agents/a/inbox")
    ));
    assert!(!is_public_mesh_route(
        "POST",
        &url("http://h/agents/a/card")
    ));
    assert!(!is_public_mesh_route(
        "DELETE",
        &url("http://h/agents/a/health")
    ));
    assert!(!is_public_mesh_route(
        "POST",
        &url("http://h/agents/a/inbox#x")
    ));
    assert!(!is_public_mesh_route(
        "POST",
        &url("http://h/agent/a/inbox")
    ));
}

#[tokio::test]
async fn srv_22_a_recorded_control_api_is_refused_without_registering_it_here() {
    let (_held, port) = fresh_port();
    let recorded = Policy {
        allow_local: true,
        control_apis: vec![SocketAddr::from(([0, 0, 0, 0], port))],
        ..Policy::default()
    };
    for text in [
        format!("http://127.0.0.1:{port}/agents/x/stop"),
        format!("http://[::1]:{port}/agents"),
        format!("http://0.0.0.0:{port}/"),
    ] {
        let error = recorded
            .admit("POST", &url(&text), &table(&[]), &Pins::default())
            .await
            .unwrap_err();
        assert_eq!(error.kind, EgressErrorKind::Refused, "{text}: {error}");
    }
    // Without the record the same address is allowed: the refusal came from it.
    let unrecorded = policy(true);
    let text = format!("http://127.0.0.1:{port}/agents/x/stop");
    assert!(
        unrecorded
            .admit("POST", &url(&text), &table(&[]), &Pins::default())
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn srv_22_srv_26_a_websocket_upgrade_reaches_another_daemons_agent_routes_only() {
    let port = protected_port();
    let names = table(&[("localhost", &["127.0.0.1"])]);
    for text in [
        format!("ws://127.0.0.1:{port}/agents/other/ws"),
        format!("ws://localhost:{port}/agents/did:key:z6Mk/chat/room"),
    ] {
        let admitted = policy(false)
            .admit("GET", &url(&text), &names, &Pins::default())
            .await;
        assert!(admitted.is_ok(), "{text}: {admitted:?}");
    }
    for (method, text) in [
        // The same path over HTTP is the daemon's, not an upgrade.
        ("GET", format!("http://127.0.0.1:{port}/agents/other/ws")),
        ("GET", format!("ws://127.0.0.1:{port}/agents")),
        ("GET", format!("ws://127.0.0.1:{port}/agents/x")),
        ("GET", format!("ws://127.0.0.1:{port}/agents/x/")),
        ("GET", format!("ws://127.0.0.1:{port}/events")),
        ("GET", format!("ws://127.0.0.1:{port}/agents/%2e%2e/config")),
        ("GET", format!("ws://127.0.0.1:{port}/agents/x/ws?token=1")),
    ] {
        let error = policy(true)
            .admit(method, &url(&text), &names, &Pins::default())
            .await
            .unwrap_err();
        assert!(error.reason.contains("control API"), "{text}: {error}");
    }
}

#[tokio::test]
async fn srv_25_a_discovered_lan_peer_admits_its_mesh_routes_only() {
    // An address of this test alone (TEST-NET ranges are refused as reserved, so a private
    // one): no other test of this binary announces it.
    let peer: SocketAddr = "10.93.17.2:7385".parse().unwrap();
    let agent = policy(false);
    let card = url("http://10.93.17.2:7385/agents/beta/card");
    let inbox = url("http://10.93.17.2:7385/agents/beta/inbox");
    let other_path = url("http://10.93.17.2:7385/agents");
    let other_port = url("http://10.93.17.2:7386/agents/beta/card");
    let neighbour = url("http://10.93.17.3:7385/agents/beta/card");
    let ip = peer.ip();
    // Before discovery, rule 5 refuses the private address.
    assert!(agent.check_address(ip, 7385, "GET", &card).is_err());
    let held = adf_egress::lan::admit_peer(peer);
    assert!(agent.check_address(ip, 7385, "GET", &card).is_ok());
    assert!(agent.check_address(ip, 7385, "POST", &inbox).is_ok());
    // Not the whole host, nor the range: another path, port or address stays refused.
    assert!(agent.check_address(ip, 7385, "GET", &other_path).is_err());
    assert!(agent.check_address(ip, 7385, "GET", &inbox).is_err());
    assert!(agent.check_address(ip, 7386, "GET", &other_port).is_err());
    let upgrade = url("ws://10.93.17.2:7385/agents/beta/socket");
    assert!(agent.check_address(ip, 7385, "GET", &upgrade).is_err());
    let neighbour_ip: IpAddr = "10.93.17.3".parse().unwrap();
    assert!(
        agent
            .check_address(neighbour_ip, 7385, "GET", &neighbour)
            .is_err()
    );
    // Outside a network namespace of its own, a test build still never dials it.
    if !adf_egress::lan::in_separate_network_namespace() {
        let admitted = agent
            .admit("GET", &card, &table(&[]), &Pins::default())
            .await
            .unwrap_err();
        assert_eq!(
            admitted.kind,
            EgressErrorKind::OffMachineInTest,
            "{admitted}"
        );
    }
    // Rule 1 comes first: an announcement of a metadata address admits nothing.
    let metadata: SocketAddr = "169.254.169.254:80".parse().unwrap();
    let _bad = adf_egress::lan::admit_peer(metadata);
    assert!(
        agent
            .check_address(
                metadata.ip(),
                80,
                "GET",
                &url("http://169.254.169.254/agents/x/card")
            )
            .is_err()
    );
    drop(held);
    assert!(agent.check_address(ip, 7385, "GET", &card).is_err());
}
