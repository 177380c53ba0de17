//! The agent card (§11.5, missing-tables §11.5): built from the file's config and identity,
//! signed with the agent's key when it can be opened (unsigned and without `did` otherwise, as
//! the reference serves it). Endpoints are outside the signature, so one signed card serves
//! every requester.

use adf_crypto::card::{CardInputs, build_card, card_policies};
use adf_store::AdfFile;
use serde_json::{Value, json};

use crate::identity::LocalKeys;

/// The card of `file`'s agent, served under `base_url` (`http://host:port`).
pub fn build(
    file: &mut AdfFile,
    keys: Option<&LocalKeys>,
    base_url: &str,
) -> Result<Value, String> {
    let config = file.config_shared().map_err(|e| e.to_string())?;
    let text = |pointer: &str| {
        config
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let handle = text("/handle");
    let root = format!("{}/agents/{handle}", base_url.trim_end_matches('/'));
    let endpoints = endpoints(&config, &root);
    let resolution = config
        .pointer("/card/resolution")
        .cloned()
        .unwrap_or_else(|| json!({ "method": "self", "endpoint": format!("{root}/card") }));
    let api_routes = config
        .pointer("/serving/api")
        .and_then(Value::as_array)
        .map(|routes| {
            routes
                .iter()
                .filter(|r| r.get("on_card").and_then(Value::as_bool) == Some(true))
                .filter_map(|r| {
                    Some((
                        r.get("method")?.as_str()?.to_owned(),
                        r.get("path")?.as_str()?.to_owned(),
                    ))
                })
                .collect()
        })
        .unwrap_or_default();
    let shared = shared_files(file, &config)?;
    let level = super::security_level(&config);
    // §5.22: unexpired attestations about the current DID, only when the owner publishes them.
    let publish = config
        .pointer("/card/publish_attestations")
        .and_then(Value::as_bool)
        == Some(true);
    let attestations = published_attestations(file, publish)?;
    let inputs = CardInputs {
        handle,
        description: text("/description"),
        icon: text("/icon"),
        resolution,
        endpoints,
        api_routes,
        public: config
            .pointer("/serving/public/enabled")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        shared,
        attestations,
        policies: card_policies(level, publish),
    };
    let signer = super::agent_key(file, keys).ok();
    build_card(&inputs, signer.as_ref(), &adf_store::time::now_iso()).map_err(|e| e.to_string())
}

/// The card's `endpoints`: inbox, card and health under `root`, the first WS route, then the
/// config's own `card.endpoints` over them.
fn endpoints(config: &Value, root: &str) -> Value {
    let mut endpoints = json!({
        "inbox": format!("{root}/inbox"),
        "card": format!("{root}/card"),
        "health": format!("{root}/health"),
    });
    // `ws`: the first WS route, on the same origin (missing-tables §11.5).
    if let Some(ws_path) = config
        .pointer("/serving/api")
        .and_then(Value::as_array)
        .and_then(|routes| {
            routes.iter().find(|r| {
                r.get("method")
                    .and_then(Value::as_str)
                    .is_some_and(|m| m.eq_ignore_ascii_case("WS"))
            })
        })
        .and_then(|r| r.get("path").and_then(Value::as_str))
        && let Some(target) = endpoints.as_object_mut()
    {
        let ws_root = root
            .strip_prefix("https://")
            .map(|rest| format!("wss://{rest}"))
            .or_else(|| {
                root.strip_prefix("http://")
                    .map(|rest| format!("ws://{rest}"))
            })
            .unwrap_or_else(|| root.to_owned());
        target.insert(
            "ws".into(),
            json!(format!("{ws_root}/{}", ws_path.trim_start_matches('/'))),
        );
    }
    if let Some(overrides) = config.pointer("/card/endpoints").and_then(Value::as_object)
        && let Some(target) = endpoints.as_object_mut()
    {
        for (k, v) in overrides {
            target.insert(k.clone(), v.clone());
        }
    }
    endpoints
}

/// The files the card lists as shared: those matching `serving.shared.patterns`, when enabled.
fn shared_files(file: &mut AdfFile, config: &Value) -> Result<Vec<String>, String> {
    let shared_enabled = config
        .pointer("/serving/shared/enabled")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    Ok(if shared_enabled {
        let patterns: Vec<String> = config
            .pointer("/serving/shared/patterns")
            .and_then(Value::as_array)
            .map(|p| {
                p.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        file.file_list("")
            .map_err(|e| e.to_string())?
            .into_iter()
            .map(|f| f.path)
            .filter(|path| patterns.iter().any(|p| adf_store::glob::matches(p, path)))
            .collect()
    } else {
        Vec::new()
    })
}

/// §5.22: unexpired attestations about the current DID, only when the owner publishes them.
fn published_attestations(
    file: &mut AdfFile,
    publish: bool,
) -> Result<Vec<adf_crypto::Attestation>, String> {
    Ok(
        match (publish, super::agent_did(file).map_err(|e| e.to_string())?) {
            (true, Some(did)) => {
                let stored: Vec<adf_crypto::Attestation> = file
                    .attestations()
                    .map_err(|e| e.to_string())?
                    .iter()
                    .map(crate::identity::from_store_attestation)
                    .collect();
                adf_crypto::card::publishable_attestations(&stored, &did, chrono::Utc::now())
            }
            _ => Vec::new(),
        },
    )
}
