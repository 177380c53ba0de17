//! A local Slack API server (Socket Mode WebSocket + Web API) for adapter tests.
