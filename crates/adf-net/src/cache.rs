//! The response cache of `cache_ttl_ms` routes: per agent, keyed by method, path and query.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::response::Shaped;

/// Most entries one agent keeps; past it, expired entries go first, then the cache empties.
const MAX_ENTRIES: usize = 256;

#[derive(Debug, Default)]
pub(crate) struct ResponseCache {
    entries: Mutex<HashMap<String, (Instant, Shaped)>>,
}

impl ResponseCache {
    /// The cached response for `key`, if it has not expired at `now`.
    pub(crate) fn get(&self, key: &str, now: Instant) -> Option<Shaped> {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries
            .get(key)
            .filter(|(expires, _)| *expires > now)
            .map(|(_, shaped)| shaped.clone())
    }

    pub(crate) fn put(&self, key: String, ttl: Duration, now: Instant, shaped: Shaped) {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if entries.len() >= MAX_ENTRIES {
            entries.retain(|_, (expires, _)| *expires > now);
            if entries.len() >= MAX_ENTRIES {
                entries.clear();
            }
        }
        entries.insert(key, (now + ttl, shaped));
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn shaped(body: &str) -> Shaped {
        Shaped {
            status: 200,
            headers: vec![("content-type".into(), "text/plain".into())],
            body: body.as_bytes().to_vec(),
        }
    }

    #[test]
    fn srv_08_entries_live_for_their_ttl_only() {
        let cache = ResponseCache::default();
        let start = Instant::now();
        cache.put(
            "GET /a".into(),
            Duration::from_millis(100),
            start,
            shaped("one"),
        );
        assert_eq!(cache.get("GET /a", start).unwrap().body, b"one");
        assert!(cache.get("GET /b", start).is_none());
        assert!(
            cache
                .get("GET /a", start + Duration::from_millis(100))
                .is_none()
        );
    }

    #[test]
    fn a_full_cache_drops_expired_entries_first() {
        let cache = ResponseCache::default();
        let start = Instant::now();
        for i in 0..MAX_ENTRIES {
            cache.put(
                format!("old{i}"),
                Duration::from_millis(1),
                start,
                shaped("x"),
            );
        }
        let later = start + Duration::from_millis(5);
        cache.put("new".into(), Duration::from_secs(1), later, shaped("y"));
        assert_eq!(cache.get("new", later).unwrap().body, b"y");
        assert_eq!(cache.entries.lock().unwrap().len(), 1);
    }
}
