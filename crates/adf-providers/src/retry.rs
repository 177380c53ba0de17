//! Retry policy for transient provider errors (§5.20 `recovery`, §6.2).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::error::ProviderError;

/// What a retry observer is told before each scheduled retry. The executor turns these into
/// `provider_error` warn log rows and `provider.retry_scheduled` events.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryNotice {
    /// Provider id.
    pub provider: String,
    /// The attempt that just failed (1-based).
    pub attempt: u32,
    /// The configured maximum number of attempts.
    pub max_attempts: u32,
    /// How long until the next attempt.
    pub delay: Duration,
    /// The error that failed the attempt.
    pub error: ProviderError,
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
    /// clamped to the reference's bounds: attempts ≤ 100, base ≤ 1 h, ceiling ≤ 24 h).
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

    /// Runs `op` until it succeeds, fails with a non-transient error, or the attempts run out.
    /// Each scheduled retry is logged as a `provider_error` warning and shown to the observer.
    pub(crate) async fn run<T, F, Fut>(&self, provider: &str, mut op: F) -> Result<T, ProviderError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, ProviderError>>,
    {
        let max = self.attempts();
        let mut attempt = 1;
        loop {
            match op().await {
                Ok(v) => return Ok(v),
                Err(e) if e.is_transient() && attempt < max => {
                    let retry_after = match &e {
                        ProviderError::Transient { retry_after, .. } => *retry_after,
                        _ => None,
                    };
                    let delay = self.sample_delay(attempt, retry_after);
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
                    if let Some(obs) = &self.observer {
                        obs(&RetryNotice {
                            provider: provider.to_owned(),
                            attempt,
                            max_attempts: max,
                            delay,
                            error: e.clone(),
                        });
                    }
                    tokio::time::sleep(delay).await;
                    attempt += 1;
                }
                Err(e) => return Err(e.with_attempts(attempt)),
            }
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
}
