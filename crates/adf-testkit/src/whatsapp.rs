//! A local WhatsApp Business Cloud API (Graph API) server for adapter tests.
