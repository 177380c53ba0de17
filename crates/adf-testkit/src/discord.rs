//! A local Discord API server (Gateway WebSocket + REST) for adapter tests.
