//! Built-in tools: `sys_set_state` (tools guide "sys_set_state", missing-tables §6.1–§6.3,
//! spec §6.2).
//!
//! Who may set which state (§6.2): the model and code through `sys_set_state` may choose
//! `idle`, `hibernate` or `off` only; `active` comes from triggers and `suspended` from the
//! runtime, so the schema's enum holds exactly those three and anything else is bad input. The
//! owner changes state through runtime controls (`adf config`, the daemon), not this tool.
//!
//! The state is stored in `config.state` by the runtime on the agent's behalf: it is not an
//! agent config edit, so `locked_fields` and the other §5.17 rules do not apply, and the write
//! goes through the store as the runtime ([`adf_store::Caller::Owner`]), which still rejects a
//! value that would make the config invalid. From an inner loop the tool changes only that
//! loop's executor (§6.2, STL-07): the agent's stored state is left alone.
//!
//! The call always ends the turn (§6.3). The result says so in data the executor reads rather
//! than prose it would have to parse: `{"state", "previous_state", "scope", "ends_turn": true}`
//! (`scope` is `"agent"`, or `"loop"` with the loop's name under `"loop"`). Deferral (a lambda
//! setting `idle`/`hibernate` mid-turn takes effect at the end of the turn; `off` never waits)
//! is the executor's business; the tool records the state at once.

use std::sync::Arc;

use adf_store::ConfigAction;
use serde_json::{Value, json};

use crate::tools::{Tool, ToolCaller, ToolContext, ToolError};

/// The states `sys_set_state` may set (§6.2).
pub const SETTABLE_STATES: [&str; 3] = ["idle", "hibernate", "off"];

/// The tools of this family.
pub fn tools() -> Vec<Arc<dyn Tool>> {
    vec![Arc::new(SysSetState)]
}

struct SysSetState;

impl Tool for SysSetState {
    declare_tool! {
        name: "sys_set_state",
        description: "Change state and end the current turn: \"idle\" waits for any trigger (messages, file changes, timers), \"hibernate\" wakes only for timers, \"off\" stops the agent until the owner restarts it.",
        parameters: super::args::one_argument(
            "state",
            json!({ "type": "string", "enum": SETTABLE_STATES, "description": "idle, hibernate or off." }),
        ),
    }

    fn run(&self, cx: &mut ToolContext<'_>, args: Value) -> Result<Value, ToolError> {
        let state = args
            .get("state")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if !SETTABLE_STATES.contains(&state) {
            return Err(ToolError::invalid(format!(
                "sys_set_state sets idle, hibernate or off, not '{state}'"
            )));
        }
        if let ToolCaller::Model { loop_name } = cx.caller
            && loop_name != "main"
        {
            return Ok(json!({
                "state": state,
                "scope": "loop",
                "loop": loop_name,
                "ends_turn": true,
            }));
        }
        let previous = cx
            .config
            .get("state")
            .and_then(Value::as_str)
            .unwrap_or("active")
            .to_owned();
        if previous != state {
            cx.file.config_set_path(
                adf_store::Caller::Owner,
                "state",
                ConfigAction::Set,
                Value::String(state.to_owned()),
            )?;
        }
        Ok(json!({
            "state": state,
            "previous_state": previous,
            "scope": "agent",
            "ends_turn": true,
        }))
    }
}
