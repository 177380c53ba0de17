//! Property tests: did:key round trip, canonical JSON laws, and "never panics" for ALF ingress.
use crate::common;

use adf_crypto::RuntimeIdentity;
use adf_crypto::alf::{self, IngressPolicy, Receiver};
use adf_crypto::canonical::{canonicalize, canonicalize_json_text};
use adf_crypto::did::{did_from_public_bytes, public_bytes_from_did};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        // Finite doubles only: JSON has no NaN/Infinity.
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        any::<String>().prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
            prop::collection::vec((any::<String>(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

fn strip_proto(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| k.as_str() != "__proto__")
                .map(|(k, v)| (k.clone(), strip_proto(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(strip_proto).collect()),
        other => other.clone(),
    }
}

/// Number-insensitive equality: canonical form goes through doubles (`1.0` prints as `1`).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

fn is_array_index(k: &str) -> bool {
    k.parse::<u64>()
        .is_ok_and(|n| n < 4_294_967_295 && n.to_string() == k)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn idn_03_did_key_roundtrip(raw in any::<[u8; 32]>()) {
        let did = did_from_public_bytes(&raw);
        prop_assert!(did.starts_with("did:key:z6Mk"));
        prop_assert_eq!(public_bytes_from_did(&did).unwrap(), raw);
    }

    #[test]
    fn idn_03_did_key_decode_never_panics(s in ".{0,80}") {
        let _ = public_bytes_from_did(&s);
        let _ = public_bytes_from_did(&format!("did:key:z{s}"));
    }

    #[test]
    fn idn_39_canonical_is_idempotent_and_parse_equivalent(v in arb_json()) {
        let c = canonicalize(&v);
        // Parse-equivalence: the canonical text denotes the same value (minus `__proto__`).
        let back: Value = serde_json::from_str(&c).unwrap();
        prop_assert!(same(&back, &strip_proto(&v)), "{} vs {}", back, v);
        // Idempotence, through both serde_json and our JS-semantics parser.
        prop_assert_eq!(&canonicalize(&back), &c);
        prop_assert_eq!(&canonicalize_json_text(&c).unwrap(), &c);
    }

    #[test]
    fn idn_39_canonical_key_order(keys in prop::collection::btree_set(".{0,6}", 0..10)) {
        let m: Map<String, Value> = keys.iter().filter(|k| k.as_str() != "__proto__").map(|k| (k.clone(), Value::Null)).collect();
        let c = canonicalize(&Value::Object(m));
        let back: Map<String, Value> = serde_json::from_str(&c).unwrap();
        let order: Vec<&String> = back.keys().collect();
        let (idx, rest): (Vec<&String>, Vec<&String>) = order.iter().copied().partition(|k| is_array_index(k));
        prop_assert!(idx.windows(2).all(|w| w[0].parse::<u64>().unwrap() < w[1].parse::<u64>().unwrap()));
        prop_assert!(rest.windows(2).all(|w| w[0].encode_utf16().lt(w[1].encode_utf16())));
        prop_assert_eq!(&order[..idx.len()], &idx[..]);
    }

    #[test]
    fn msg_13_alf_ingress_never_panics_on_bytes(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let rt = RuntimeIdentity::generate_with(&mut common::seeded_rng(1));
        let did = rt.did();
        let recv = Receiver { did: &did, aliases: &[], signing_key: Some(rt.keys().signing_key()) };
        for policy in [IngressPolicy { require_signature: true, require_payload_signature: true },
                       IngressPolicy { require_signature: false, require_payload_signature: false }] {
            let _ = alf::ingress_bytes(&bytes, &recv, &policy);
        }
    }

    #[test]
    fn msg_13_alf_ingress_never_panics_on_json(payload in arb_json(), meta in arb_json(), sig in prop_oneof![Just(Value::Null), any::<String>().prop_map(Value::from), Just(json!("ed25519:AAAA"))], encrypted in any::<bool>()) {
        let rt = RuntimeIdentity::generate_with(&mut common::seeded_rng(2));
        let did = rt.did();
        let mut payload = payload;
        if encrypted && let Value::Object(m) = &mut payload {
            m.insert("content_type".into(), json!("application/x-adf-encrypted"));
        }
        let msg = json!({"from": did, "to": did, "meta": meta, "payload": payload, "signature": sig});
        let recv = Receiver { did: &did, aliases: &[], signing_key: Some(rt.keys().signing_key()) };
        let policy = IngressPolicy { require_signature: false, require_payload_signature: false };
        let _ = alf::ingress(msg.clone(), &recv, &policy);
        let _ = alf::ingress_bytes(msg.to_string().as_bytes(), &recv, &policy);
    }
}
