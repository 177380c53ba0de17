//! The agent's declared network as the daemon opens it: at load and when it leaves `off`, its
//! umbilical replay log, its enabled `ws_connections` and its `stream_bindings`
//! ([`open_configured_connections`]); after a config change, the same declaration reconciled
//! with what is open ([`reconcile_configured_connections`]). Releasing is the hub's
//! (`Hub::release_network`).

use std::sync::Arc;

use adf_net::ServedAgent;
use serde_json::Value;

use crate::hub::Hub;

/// At load: the agent's umbilical replay log (`umbilical.log`), its enabled
/// `ws_connections` and then its declared `stream_bindings` (a connection or binding that
/// fails is a warning, never a failed load).
pub(crate) async fn open_configured_connections(
    hub: &Arc<Hub>,
    agent: &Arc<crate::registry::Agent>,
) {
    // Read on the agent's own worker, not on a connection of its own: a second connection's
    // open can be refused while the worker checkpoints or closes the file (busy), and a
    // declared network that silently stayed closed was the result.
    let config = agent.job(|file| file.config()).await;
    // Whenever nothing opens, the agent stays marked released, so its next state change
    // tries again instead of finding nothing to reopen.
    let mut config = match config {
        Ok(config) => config,
        Err(error) => {
            tracing::warn!(agent = %agent.id, %error, "cannot read the config to open the declared network");
            hub.mark_network_released(&agent.id);
            return;
        }
    };
    agent.watch().network_opened(&config);
    // The live state decides, not the stored one: `POST /state` is not persisted, so an
    // agent stored `off` and turned back on still reads `off` in its file.
    let live = agent.info().display_state;
    if live == "off" {
        hub.mark_network_released(&agent.id);
        return;
    }
    if let Some(fields) = config.as_object_mut() {
        fields.insert("state".to_owned(), Value::String(live));
    }
    hub.umbilical().configure(&agent.id, &config);
    let entries = config
        .get("ws_connections")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let served = ServedAgent {
        id: agent.id.clone(),
        path: agent.path.clone(),
    };
    for entry in entries {
        if entry.get("enabled").and_then(Value::as_bool) == Some(false) {
            continue;
        }
        let policy = adf_net::tools::ws_policy(&config);
        let outcome = match adf_net::outbound::OutboundSpec::from_entry(&entry, policy) {
            Ok(spec) => hub.outbound().connect(served.clone(), spec).await,
            Err(why) => Err(why),
        };
        if let Err(why) = outcome {
            let id = entry.get("id").and_then(Value::as_str).unwrap_or("?");
            tracing::warn!(agent = %agent.id, connection = id, %why, "ws_connections entry not opened");
        }
    }
    // After the connections: a declared `ws` endpoint names one of them (SRV-41).
    for (binding, why) in hub.streams().materialize(&agent.id, &config) {
        tracing::warn!(agent = %agent.id, %binding, %why, "stream_bindings entry not materialized");
    }
}

/// After a config change at run time: declared bindings end and materialize again from the
/// new config, connections of `ws_connections` entries now gone or disabled close, and new
/// or re-enabled entries open (open ones stay: the connect finds them by config id).
pub(crate) async fn reconcile_configured_connections(
    hub: &Arc<Hub>,
    agent: &Arc<crate::registry::Agent>,
) {
    let config = match agent.job(|file| file.config()).await {
        Ok(config) => config,
        Err(error) => {
            tracing::warn!(agent = %agent.id, %error, "cannot read the config to reconcile the declared network");
            return;
        }
    };
    let wanted: Vec<&str> = config
        .get("ws_connections")
        .and_then(Value::as_array)
        .map(|entries| {
            entries
                .iter()
                .filter(|e| e.get("enabled").and_then(Value::as_bool) != Some(false))
                .filter_map(|e| e.get("id").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default();
    for open in hub.outbound().list(&agent.id) {
        // Ad-hoc connections that were not saved have no config id: code owns them.
        if let Some(config_id) = &open.config_id
            && !wanted.contains(&config_id.as_str())
        {
            hub.outbound().disconnect(&agent.id, &open.id);
        }
    }
    hub.streams().release_declared(&agent.id);
    open_configured_connections(hub, agent).await;
}
