//! Retry policy for transient provider errors (§5.20 `recovery`, §6.2).
//!
//! Retries fit the failure ([`RetryPolicy::next_retry`], a pure function of the error, the
//! attempt and the time already waited):
//! - a model server on this machine or its private network ([`is_local_model_server`]) that
//!   refuses the connection, or whose name does not resolve, is not about to come up: one
//!   quick retry ([`LOCAL_RETRY_DELAY`]), then the request fails naming the URL;
//! - every other transient failure (429, 5xx, resets, timeouts, streams cut short, a remote
//!   server refusing) backs off per `recovery` (doubling, ±20 % jitter), never sooner than the
//!   server's `Retry-After`, and only while the waits stay within `recovery.retry_budget_ms`
//!   (an ADF extension, default [`DEFAULT_RETRY_BUDGET`]); a `Retry-After` longer than
//!   `max_delay_ms` or than the budget left ends the retries instead of being cut short.
//!
//! Every scheduled retry is a `provider_error` warning, goes to the policy's observer and to
//! the observer the caller set for the request in flight ([`watch_retries`]).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::error::ProviderError;

/// The wait before the one retry a local model server that refused (or did not resolve) gets.
pub const LOCAL_RETRY_DELAY: Duration = Duration::from_millis(500);

/// `recovery.retry_budget_ms` when absent: the total wait between the attempts of one
/// request. With the §5.20 defaults the four waits (15 + 30 + 60 + 120 s, +20 % at most,
/// 270 s) fit, so the spec's behaviour is unchanged; a long `Retry-After` is what it cuts.
pub const DEFAULT_RETRY_BUDGET: Duration = Duration::from_millis(300_000);

tokio::task_local! {
    /// The observer of the request the current task is making (see [`watch_retries`]).
    static REQUEST_WATCH: RetryObserver;
}

/// Runs `request` (a provider's `stream` or `complete`) with `observer` told of each retry it
/// schedules, besides the policy's own observer. A provider is shared by the loops of an agent,
/// while a retry belongs to one request of one loop: a task-local scope carries the observer
/// to the provider's retry loop, which runs on the caller's task.
pub async fn watch_retries<F: std::future::Future>(
    observer: RetryObserver,
    request: F,
) -> F::Output {
    REQUEST_WATCH.scope(observer, request).await
}

/// Whether the model server at `url` is on this machine or its private network, judged from
/// the URL alone: a loopback, private (10/8, 172.16/12, 192.168/16, CGNAT, fc00::/7),
/// link-local or unspecified address, or a name that only a local resolver answers
/// (`localhost`, `*.localhost`, a single label such as a container's `ollama`, `*.local`,
/// `*.lan`, `*.internal`, `*.home.arpa`, `*.localdomain`). Any other name counts as remote:
/// the policy does not resolve names to decide.
pub fn is_local_model_server(url: &str) -> bool {
    let Some(host) = reqwest::Url::parse(url)
        .ok()
        .and_then(|parsed| parsed.host_str().map(str::to_owned))
    else {
        return false;
    };
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let Ok(ip) = bare.parse::<std::net::IpAddr>() else {
        let name = bare.trim_end_matches('.').to_ascii_lowercase();
        return name == "localhost"
            || !name.contains('.')
            || [
                ".localhost",
                ".local",
                ".lan",
                ".internal",
                ".home.arpa",
                ".localdomain",
            ]
            .iter()
            .any(|suffix| name.ends_with(suffix));
    };
    let ip = adf_egress::rules::canonical(ip);
    ip.is_loopback()
        || adf_egress::rules::link_local_or_metadata(ip).is_some()
        || adf_egress::rules::local_kind(ip)
            .is_some_and(|kind| !matches!(kind, "multicast" | "reserved"))
}

/// What a retry observer is told before each scheduled retry. The executor turns these into
/// `provider_error` warn log rows and `turn.retry` progress events.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryNotice {
    /// Provider id.
    pub provider: String,
    /// The attempt that just failed (1-based); the retry is attempt `attempt + 1`.
    pub attempt: u32,
    /// The most attempts this request may make for this failure: `recovery.max_attempts`,
    /// or 2 for a local server that refused (one quick retry).
    pub max_attempts: u32,
    /// Short words for the failure ("connection reset", "rate limited (429)").
    pub reason: String,
    /// How long until the next attempt.
    pub delay: Duration,
    /// The error that failed the attempt.
    pub error: ProviderError,
}

impl RetryNotice {
    /// "retrying in 4 s (2/5): connection reset": the wait, the attempt the retry makes out
    /// of the most this failure allows, and why. What `adf chat`, `adf events` and the Studio
    /// show.
    pub fn describe(&self) -> String {
        let millis = self.delay.as_millis();
        let wait = if millis.is_multiple_of(1000) {
            format!("{} s", millis / 1000)
        } else {
            format!("{:.1} s", self.delay.as_secs_f64())
        };
        format!(
            "retrying in {wait} ({}/{}): {}",
            self.attempt + 1,
            self.max_attempts,
            self.reason
        )
    }
}

/// Called before each retry sleep.
pub type RetryObserver = Arc<dyn Fn(&RetryNotice) + Send + Sync>;

/// `recovery` (§5.20): attempts and exponential backoff with ±20 % jitter.
#[derive(Clone)]
pub struct RetryPolicy {
    /// `auto_retry`: when false, a transient error fails at once.
    pub auto_retry: bool,
    /// Total attempts, the first included (≥ 1).
    pub max_attempts: u32,
    /// First delay; doubles per attempt.
    pub base_delay: Duration,
    /// Ceiling for any delay, `Retry-After` included.
    pub max_delay: Duration,
    /// `recovery.retry_budget_ms` (ADF extension): the most one request waits between its
    /// attempts in total.
    pub budget: Duration,
    /// Optional observer of scheduled retries.
    pub observer: Option<RetryObserver>,
}

impl fmt::Debug for RetryPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryPolicy")
            .field("auto_retry", &self.auto_retry)
            .field("max_attempts", &self.max_attempts)
            .field("base_delay", &self.base_delay)
            .field("max_delay", &self.max_delay)
            .field("budget", &self.budget)
            .field("observer", &self.observer.is_some())
            .finish()
    }
}

impl Default for RetryPolicy {
    /// The §5.20 defaults: on, 5 attempts, 15 s doubling, 300 s ceiling.
    fn default() -> Self {
        RetryPolicy {
            auto_retry: true,
            max_attempts: 5,
            base_delay: Duration::from_millis(15_000),
            max_delay: Duration::from_millis(300_000),
            budget: DEFAULT_RETRY_BUDGET,
            observer: None,
        }
    }
}

impl RetryPolicy {
    /// No retries at all.
    pub fn none() -> Self {
        RetryPolicy {
            auto_retry: false,
            max_attempts: 1,
            ..RetryPolicy::default()
        }
    }

    /// Reads an agent's `recovery` object (absent fields take the §5.20 defaults; values are
    /// clamped to the reference's bounds: attempts ≤ 100, base ≤ 1 h, ceiling ≤ 24 h; the
    /// extension `retry_budget_ms` ≤ 24 h, default [`DEFAULT_RETRY_BUDGET`]).
    pub fn from_recovery(recovery: Option<&Value>) -> Self {
        let d = RetryPolicy::default();
        let Some(r) = recovery.filter(|r| r.is_object()) else {
            return d;
        };
        let ms = |k: &str, def: Duration, cap: u64| {
            r.get(k)
                .and_then(Value::as_u64)
                .map(|v| Duration::from_millis(v.min(cap)))
                .unwrap_or(def)
        };
        RetryPolicy {
            auto_retry: r
                .get("auto_retry")
                .and_then(Value::as_bool)
                .unwrap_or(d.auto_retry),
            max_attempts: r
                .get("max_attempts")
                .and_then(Value::as_u64)
                .map(|v| v.clamp(1, 100) as u32)
                .unwrap_or(d.max_attempts),
            base_delay: ms("base_delay_ms", d.base_delay, 3_600_000),
            max_delay: ms("max_delay_ms", d.max_delay, 86_400_000),
            budget: ms("retry_budget_ms", d.budget, 86_400_000),
            observer: None,
        }
    }

    /// Sets the observer.
    pub fn with_observer(mut self, observer: RetryObserver) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Attempts this policy allows in total.
    pub fn attempts(&self) -> u32 {
        if self.auto_retry {
            self.max_attempts.max(1)
        } else {
            1
        }
    }

    /// The nominal delay after failed attempt `attempt` (1-based), before jitter:
    /// `base · 2^(attempt-1)`, capped at `max_delay`.
    pub fn nominal_delay(&self, attempt: u32) -> Duration {
        let factor = 2u32.saturating_pow(attempt.saturating_sub(1));
        self.base_delay
            .checked_mul(factor)
            .unwrap_or(self.max_delay)
            .min(self.max_delay)
    }

    /// The delay to sleep after failed attempt `attempt`: the nominal delay with ±20 % jitter,
    /// raised to the server's `Retry-After` when that is longer, never above `max_delay`.
    /// `unit_jitter` is a sample from [-1, 1] (random in production, fixed in tests).
    pub fn delay(&self, attempt: u32, retry_after: Option<Duration>, unit_jitter: f64) -> Duration {
        let nominal = self.nominal_delay(attempt);
        let jittered = nominal.mul_f64(1.0 + 0.2 * unit_jitter.clamp(-1.0, 1.0));
        jittered
            .max(retry_after.unwrap_or_default())
            .min(self.max_delay)
    }

    /// [`delay`](Self::delay) with a random jitter.
    pub fn sample_delay(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        self.delay(attempt, retry_after, rand::random_range(-1.0..=1.0))
    }

    /// Whether to retry after attempt `attempt` (1-based) failed with `error`, having waited
    /// `waited` so far: `Some((wait, max_attempts))`, or `None` to give up. `unit_jitter` is
    /// a sample from [-1, 1]. See the module docs for the rules.
    pub fn next_retry(
        &self,
        error: &ProviderError,
        attempt: u32,
        waited: Duration,
        unit_jitter: f64,
    ) -> Option<(Duration, u32)> {
        if !error.is_transient() {
            return None;
        }
        let max = self.attempts();
        if let ProviderError::Unreachable { local: true, .. } = error {
            let max = max.min(2);
            return (attempt < max).then(|| (LOCAL_RETRY_DELAY.min(self.max_delay), max));
        }
        if attempt >= max {
            return None;
        }
        let retry_after = match error {
            ProviderError::Transient { retry_after, .. } => *retry_after,
            _ => None,
        };
        // Retrying before the server's Retry-After only earns another refusal.
        if retry_after.is_some_and(|after| after > self.max_delay) {
            return None;
        }
        let wait = self.delay(attempt, retry_after, unit_jitter);
        (waited + wait <= self.budget).then_some((wait, max))
    }

    /// Runs `op` until it succeeds, fails with an error not worth retrying, or
    /// [`next_retry`](Self::next_retry) gives up. Each scheduled retry is logged as a
    /// `provider_error` warning and shown to the observers.
    pub(crate) async fn run<T, F, Fut>(&self, provider: &str, mut op: F) -> Result<T, ProviderError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, ProviderError>>,
    {
        let mut attempt = 1;
        let mut waited = Duration::ZERO;
        loop {
            let e = match op().await {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            let jitter = rand::random_range(-1.0..=1.0);
            let Some((delay, max)) = self.next_retry(&e, attempt, waited, jitter) else {
                return Err(e.with_attempts(attempt));
            };
            tracing::warn!(
                target: "adf::provider",
                event = "provider_error",
                provider = provider,
                status = e.status(),
                attempt,
                max_attempts = max,
                delay_ms = delay.as_millis() as u64,
                "{e}; retrying"
            );
            let notice = RetryNotice {
                provider: provider.to_owned(),
                attempt,
                max_attempts: max,
                reason: e.retry_reason(),
                delay,
                error: e,
            };
            if let Some(obs) = &self.observer {
                obs(&notice);
            }
            let _outside_a_watch = REQUEST_WATCH.try_with(|watch| watch(&notice));
            tokio::time::sleep(delay).await;
            waited += delay;
            attempt += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn stl_12_delays_double_with_jitter_and_cap() {
        let p = RetryPolicy::from_recovery(Some(&json!({})));
        let secs = |a, j| p.delay(a, None, j).as_secs_f64();
        assert_eq!(secs(1, 0.0), 15.0);
        assert_eq!(secs(2, 0.0), 30.0);
        assert_eq!(secs(3, 0.0), 60.0);
        assert!((secs(1, 1.0) - 18.0).abs() < 1e-9);
        assert!((secs(1, -1.0) - 12.0).abs() < 1e-9);
        assert_eq!(secs(6, 0.0), 300.0, "capped at max_delay_ms");
        assert_eq!(secs(40, 1.0), 300.0, "jitter never exceeds the cap");
        for _ in 0..100 {
            let d = p.sample_delay(2, None).as_secs_f64();
            assert!((24.0..=36.0).contains(&d), "{d}");
        }
        assert_eq!(p.attempts(), 5);
        assert_eq!(
            p.delay(1, Some(Duration::from_secs(40)), 0.0),
            Duration::from_secs(40),
            "Retry-After wins when longer"
        );
        let off = RetryPolicy::from_recovery(Some(&json!({"auto_retry": false})));
        assert_eq!(off.attempts(), 1);
        let clamped = RetryPolicy::from_recovery(Some(&json!({"max_attempts": 1000})));
        assert_eq!(clamped.attempts(), 100);
    }

    fn transient(status: Option<u16>, retry_after: Option<Duration>) -> ProviderError {
        ProviderError::Transient {
            provider: "p".into(),
            status,
            message: "m".into(),
            retry_after,
            attempts: 1,
            kind: crate::http::status_kind(status),
        }
    }

    fn unreachable(local: bool) -> ProviderError {
        ProviderError::Unreachable {
            provider: "p".into(),
            url: "http://127.0.0.1:9/v1".into(),
            refused: true,
            local,
            attempts: 1,
            fix: String::new(),
        }
    }

    #[test]
    fn a_local_server_that_refuses_gets_one_quick_retry() {
        let p = RetryPolicy::default();
        let local = unreachable(true);
        assert_eq!(
            p.next_retry(&local, 1, Duration::ZERO, 1.0),
            Some((LOCAL_RETRY_DELAY, 2))
        );
        assert_eq!(p.next_retry(&local, 2, LOCAL_RETRY_DELAY, 1.0), None);
        // A remote one refusing may be restarting: the §5.20 backoff.
        let remote = unreachable(false);
        assert_eq!(
            p.next_retry(&remote, 1, Duration::ZERO, 0.0),
            Some((Duration::from_secs(15), 5))
        );
        let off = RetryPolicy::from_recovery(Some(&json!({"auto_retry": false})));
        assert_eq!(off.next_retry(&local, 1, Duration::ZERO, 0.0), None);
        let one = RetryPolicy::from_recovery(Some(&json!({"max_attempts": 1})));
        assert_eq!(one.next_retry(&local, 1, Duration::ZERO, 0.0), None);
    }

    #[test]
    fn retries_stay_within_the_budget_and_never_before_retry_after() {
        let p = RetryPolicy::from_recovery(Some(&json!({"retry_budget_ms": 50_000})));
        assert_eq!(p.budget, Duration::from_secs(50));
        let e = transient(Some(503), None);
        assert_eq!(
            p.next_retry(&e, 1, Duration::ZERO, 0.0),
            Some((Duration::from_secs(15), 5))
        );
        assert_eq!(
            p.next_retry(&e, 2, Duration::from_secs(15), 0.0),
            Some((Duration::from_secs(30), 5))
        );
        assert_eq!(
            p.next_retry(&e, 3, Duration::from_secs(45), 0.0),
            None,
            "60 s more would pass the 50 s budget"
        );
        // Retry-After longer than the backoff is waited in full.
        let slow = transient(Some(429), Some(Duration::from_secs(40)));
        assert_eq!(
            p.next_retry(&slow, 1, Duration::ZERO, 1.0),
            Some((Duration::from_secs(40), 5))
        );
        // Longer than max_delay_ms: giving up beats retrying too early.
        let capped = RetryPolicy::from_recovery(Some(&json!({"max_delay_ms": 10_000})));
        assert_eq!(capped.next_retry(&slow, 1, Duration::ZERO, 0.0), None);
        // Non-transient errors never retry.
        let auth = ProviderError::Auth {
            provider: "p".into(),
            status: 401,
            message: String::new(),
            fix: String::new(),
        };
        assert_eq!(p.next_retry(&auth, 1, Duration::ZERO, 0.0), None);
        assert_eq!(
            RetryPolicy::default().budget,
            DEFAULT_RETRY_BUDGET,
            "absent retry_budget_ms"
        );
    }

    #[test]
    fn the_defaults_fit_the_default_budget() {
        // The §5.20 defaults must still make all five attempts, at the highest jitter.
        let p = RetryPolicy::default();
        let e = transient(Some(503), None);
        let mut waited = Duration::ZERO;
        for attempt in 1..5 {
            let (wait, max) = p
                .next_retry(&e, attempt, waited, 1.0)
                .unwrap_or_else(|| panic!("attempt {attempt} not retried"));
            assert_eq!(max, 5);
            waited += wait;
        }
        assert_eq!(p.next_retry(&e, 5, waited, 1.0), None);
    }

    #[test]
    fn local_model_servers_are_told_by_their_url() {
        for local in [
            "http://127.0.0.1:8088/v1",
            "http://localhost:11434/v1",
            "http://[::1]:8080/v1",
            "http://10.1.2.3/v1",
            "http://192.168.1.20:1234/v1",
            "http://172.20.0.2:8000/v1",
            "http://[fd12::1]/v1",
            "http://ollama:11434/v1",
            "http://gpu-box.local/v1",
            "http://llm.internal/v1",
            "http://box.lan/v1",
        ] {
            assert!(is_local_model_server(local), "{local}");
        }
        for remote in [
            "https://api.anthropic.com/v1",
            "https://openrouter.ai/api/v1",
            "http://8.8.8.8/v1",
            "http://[2001:4860::1]/v1",
            "not a url",
        ] {
            assert!(!is_local_model_server(remote), "{remote}");
        }
    }

    #[test]
    fn failure_kinds_come_from_the_error_chain() {
        use crate::FailureKind as K;
        use crate::http::failure_kind;
        use std::io::ErrorKind as Io;
        assert_eq!(
            failure_kind(Some(Io::ConnectionRefused), false, ""),
            K::Refused
        );
        assert_eq!(failure_kind(Some(Io::ConnectionReset), false, ""), K::Reset);
        assert_eq!(failure_kind(None, true, ""), K::Timeout);
        assert_eq!(
            failure_kind(
                None,
                false,
                "client error (Connect): dns error: failed to lookup address information"
            ),
            K::NameNotResolved
        );
        assert_eq!(
            failure_kind(None, false, "connection closed before message completed"),
            K::Reset
        );
        assert_eq!(failure_kind(None, false, "???"), K::Network);
        assert_eq!(
            transient(Some(429), None).retry_reason(),
            "rate limited (429)"
        );
        assert_eq!(
            transient(Some(503), None).retry_reason(),
            "server error (503)"
        );
        assert_eq!(unreachable(true).retry_reason(), "connection refused");
    }
}
