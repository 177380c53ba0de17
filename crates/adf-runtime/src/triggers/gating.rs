//! State gating (spec §7.5): which stored states let a trigger through, per scope.

use super::{Scope, TriggerKind};

/// Whether a trigger of `kind` reaches a target of `scope` while the agent's stored state is
/// `state`. System targets run in every state but `off`; agent targets run when active or idle,
/// only for timers when hibernating, and never when suspended or off. An unknown state is
/// treated like `off`: nothing runs until the owner fixes it.
pub fn allows(state: &str, scope: Scope, kind: TriggerKind) -> bool {
    match (scope, state) {
        (_, "off") => false,
        (Scope::System, "active" | "idle" | "hibernate" | "suspended") => true,
        (Scope::Agent, "active" | "idle") => true,
        (Scope::Agent, "hibernate") => kind == TriggerKind::OnTimer,
        _ => false,
    }
}
