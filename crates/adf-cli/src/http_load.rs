//! `adf bench http`: an open-loop HTTP load at a fixed request rate, for latency figures that
//! hold at a stated load rather than at saturation.
//!
//! A closed-loop driver such as `wrk` sends the next request only when a connection is free, so
//! while the server stalls it sends nothing and the stall hides in a few slow samples (wrk 4.1
//! corrects for this after the fact from the run's average interval). Here a pacer thread
//! schedules request `i` at `start + i / rate` whatever the server does, the connections take
//! scheduled requests from one shared queue, and each latency runs from the *scheduled* time to
//! the last body byte — a request that waited for a free connection counts its wait.
//!
//! Principal types: [`LoadOptions`] (what to send), [`LoadReport`] (what came back).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Empty};
use hyper_util::rt::TokioIo;
use serde::Serialize;
use tokio::sync::{Mutex, mpsc};

/// How long the run may go on after the last scheduled request before the requests still
/// unanswered are counted as timed out.
const DRAIN_LIMIT: Duration = Duration::from_secs(30);

/// One fixed-rate run against one URL on this machine.
#[derive(Debug, Clone)]
pub(crate) struct LoadOptions {
    pub target: Target,
    /// Requests scheduled per second, spread evenly.
    pub rate: u32,
    /// Keep-alive connections sharing the schedule.
    pub connections: usize,
    /// Measured time.
    pub duration: Duration,
    /// Time at the same rate before the measured time, not measured.
    pub warmup: Duration,
}

/// A loopback `http://` URL.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    url: adf_egress::Url,
}

impl Target {
    /// Accepts `http://` URLs to 127.0.0.0/8, ::1 or `localhost` only: the driver is for a
    /// daemon on this machine, and a load sent anywhere else would be an attack, not a bench.
    pub(crate) fn parse(url: &str) -> Result<Self> {
        let url = adf_egress::Url::parse(url)
            .with_context(|| format!("{url:?} is not a URL (like http://127.0.0.1:7385/health)"))?;
        if url.scheme() != "http" {
            bail!("adf bench http sends plain http:// only; {url} is not an http:// URL");
        }
        let host = url.host_str().unwrap_or_default();
        let loopback = host.eq_ignore_ascii_case("localhost")
            || host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<IpAddr>()
                .is_ok_and(|ip| ip.is_loopback());
        if !loopback {
            bail!(
                "adf bench http loads a daemon on this machine only: give a 127.0.0.1, [::1] or \
                 localhost URL, not {host:?}"
            );
        }
        Ok(Self { url })
    }
}

/// Latency figures of the measured requests, in milliseconds.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub(crate) struct LatencyMs {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
    pub mean: f64,
}

impl LatencyMs {
    /// Nearest-rank percentiles of `micros` (sorted in place).
    pub(crate) fn of(micros: &mut [u64]) -> Self {
        if micros.is_empty() {
            return Self::default();
        }
        micros.sort_unstable();
        let rank = |q: f64| {
            let index = ((q * micros.len() as f64).ceil() as usize).clamp(1, micros.len()) - 1;
            micros[index] as f64 / 1000.0
        };
        let sum: u64 = micros.iter().sum();
        Self {
            p50: rank(0.50),
            p90: rank(0.90),
            p99: rank(0.99),
            p999: rank(0.999),
            max: rank(1.0),
            mean: sum as f64 / micros.len() as f64 / 1000.0,
        }
    }
}

/// What a run measured.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct LoadReport {
    pub url: String,
    pub rate: u32,
    pub connections: usize,
    pub seconds: f64,
    /// Requests scheduled in the measured time.
    pub scheduled: u64,
    /// Of those, answered with a 2xx status.
    pub ok: u64,
    /// Answered with another status.
    pub non_2xx: u64,
    /// Lost to a connection error, or unanswered `DRAIN_LIMIT` after the schedule ended.
    pub failed: u64,
    /// Answers per second over the measured time.
    pub achieved_rate: f64,
    /// From each request's scheduled time to its last body byte (answered requests).
    pub latency_ms: LatencyMs,
}

impl LoadReport {
    pub(crate) fn line(&self) -> String {
        let l = &self.latency_ms;
        format!(
            "{} at {}/s over {} connections for {:.0} s: {} scheduled, {} ok, {} non-2xx, {} \
             failed; {:.0} answers/s; latency ms p50 {:.2} p90 {:.2} p99 {:.2} p99.9 {:.2} max \
             {:.2}",
            self.url,
            self.rate,
            self.connections,
            self.seconds,
            self.scheduled,
            self.ok,
            self.non_2xx,
            self.failed,
            self.achieved_rate,
            l.p50,
            l.p90,
            l.p99,
            l.p999,
            l.max
        )
    }
}

/// What one connection saw of the measured requests it answered (the rest are counted as
/// failed from the schedule).
#[derive(Default)]
struct Tally {
    micros: Vec<u64>,
    ok: u64,
    non_2xx: u64,
}

/// A scheduled request: when it should go out, and whether it is measured.
#[derive(Clone, Copy)]
struct Slot {
    due: Instant,
    measured: bool,
}

/// Runs the load on a runtime of `threads` workers (the pacer is a thread of its own).
pub(crate) fn run(options: &LoadOptions, threads: usize) -> Result<LoadReport> {
    if options.rate == 0 {
        bail!("--rate must be at least 1 request a second");
    }
    let runtime = if threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()
    }
    .context("cannot start the async runtime")?;
    runtime.block_on(drive(options.clone()))
}

async fn drive(options: LoadOptions) -> Result<LoadReport> {
    // Every connection is open before the clock starts, so connecting is not measured and a
    // daemon that is not there is an error up front rather than a run of failures.
    let mut senders = Vec::with_capacity(options.connections.max(1));
    for _ in 0..options.connections.max(1) {
        senders.push(connect(&options.target).await?);
    }
    let (schedule, queue) = mpsc::unbounded_channel::<Slot>();
    let queue = Arc::new(Mutex::new(queue));
    let workers: Vec<_> = senders
        .into_iter()
        .map(|sender| tokio::spawn(work(sender, options.target.clone(), Arc::clone(&queue))))
        .collect();

    let pacer = {
        let options = options.clone();
        std::thread::Builder::new()
            .name("adf-bench-pacer".into())
            .spawn(move || pace(&options, &schedule))
            .context("cannot start the pacer thread")?
    };
    let scheduled = tokio::task::spawn_blocking(move || pacer.join())
        .await
        .ok()
        .and_then(Result::ok)
        .context("the pacer thread failed")?;

    let mut total = Tally::default();
    // Stuck connections' tallies are gone with their tasks at the drain limit; what they did
    // not answer is counted as failed below, with the requests lost to connection errors.
    let drained = tokio::time::timeout(DRAIN_LIMIT, futures::future::join_all(workers)).await;
    if let Ok(results) = drained {
        for tally in results.into_iter().flatten() {
            total.micros.extend(tally.micros);
            total.ok += tally.ok;
            total.non_2xx += tally.non_2xx;
        }
    }
    let answered = total.ok + total.non_2xx;
    let seconds = options.duration.as_secs_f64();
    Ok(LoadReport {
        url: options.target.url.to_string(),
        rate: options.rate,
        connections: options.connections.max(1),
        seconds,
        scheduled,
        ok: total.ok,
        non_2xx: total.non_2xx,
        failed: scheduled.saturating_sub(answered),
        achieved_rate: answered as f64 / seconds,
        latency_ms: LatencyMs::of(&mut total.micros),
    })
}

/// Schedules every request of the warm-up and the measured time; returns how many of them
/// are measured. Sleeps with the OS timer (tens of microseconds), not the runtime's (1 ms).
fn pace(options: &LoadOptions, schedule: &mpsc::UnboundedSender<Slot>) -> u64 {
    let interval = Duration::from_secs_f64(1.0 / f64::from(options.rate));
    let start = Instant::now();
    let measure_from = start + options.warmup;
    let end = measure_from + options.duration;
    // Drawn on stderr, and only when it is a terminal.
    let bar = indicatif::ProgressBar::new((options.warmup + options.duration).as_secs());
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} s {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut measured = 0;
    for i in 0u32.. {
        let due = start + interval * i;
        if due >= end {
            break;
        }
        if i % options.rate == 0 {
            bar.set_position(u64::from(i / options.rate));
            bar.set_message(if due >= measure_from {
                "measuring"
            } else {
                "warming up"
            });
        }
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
        let slot = Slot {
            due,
            measured: due >= measure_from,
        };
        if schedule.send(slot).is_err() {
            break;
        }
        measured += u64::from(slot.measured);
    }
    bar.finish_and_clear();
    measured
}

/// One keep-alive HTTP/1.1 connection, driven by hyper's connection API directly: a pooled
/// client (reqwest) took half a core at 5,000 requests a second against 0.3 for this, CPU the
/// daemon under test shares on this 2-core machine.
type Sender = hyper::client::conn::http1::SendRequest<Empty<Bytes>>;

/// Opens one connection as the owner's tool: the daemon's control API is what it measures,
/// so no agent egress rule applies (`adf_egress::tcp::connect_service_tcp`).
async fn connect(target: &Target) -> Result<Sender> {
    let host = target.url.host_str().unwrap_or("localhost");
    let port = target.url.port_or_known_default().unwrap_or(80);
    let (stream, _) = adf_egress::tcp::connect_service_tcp(
        host,
        port,
        &adf_egress::SystemLookup,
        Duration::from_secs(5),
    )
    .await
    .with_context(|| format!("cannot connect to {}: is the daemon running?", target.url))?;
    stream.set_nodelay(true)?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .with_context(|| format!("HTTP handshake with {} failed", target.url))?;
    tokio::spawn(async move {
        // The connection ends with an error when the daemon closes it; the next request
        // reconnects, so there is nothing to do with it here.
        let _ended = connection.await;
    });
    Ok(sender)
}

/// One connection: takes scheduled requests until the schedule ends.
async fn work(
    mut sender: Sender,
    target: Target,
    queue: Arc<Mutex<mpsc::UnboundedReceiver<Slot>>>,
) -> Tally {
    let mut tally = Tally::default();
    loop {
        let Some(slot) = queue.lock().await.recv().await else {
            return tally;
        };
        let status = match request(&mut sender, &target).await {
            Ok(status) => Some(status),
            // One reconnect per failed request: a daemon that closed an idle connection
            // costs one retry, a daemon that is gone costs every remaining request.
            Err(_) => match connect(&target).await {
                Ok(fresh) => {
                    sender = fresh;
                    request(&mut sender, &target).await.ok()
                }
                Err(_) => None,
            },
        };
        if !slot.measured {
            continue;
        }
        if let Some(status) = status {
            tally
                .micros
                .push(u64::try_from(slot.due.elapsed().as_micros()).unwrap_or(u64::MAX));
            if (200..300).contains(&status) {
                tally.ok += 1;
            } else {
                tally.non_2xx += 1;
            }
        }
    }
}

async fn request(sender: &mut Sender, target: &Target) -> Result<u16> {
    sender.ready().await?;
    let path_and_query = match target.url.query() {
        Some(query) => format!("{}?{query}", target.url.path()),
        None => target.url.path().to_owned(),
    };
    let host = match target.url.port() {
        Some(port) => format!("{}:{port}", target.url.host_str().unwrap_or("localhost")),
        None => target.url.host_str().unwrap_or("localhost").to_owned(),
    };
    let request = hyper::Request::get(path_and_query)
        .header(hyper::header::HOST, host)
        .body(Empty::<Bytes>::new())?;
    let response = sender.send_request(request).await?;
    let status = response.status().as_u16();
    response.into_body().collect().await?;
    Ok(status)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank_over_the_sorted_samples() {
        // 1..=1000 µs shuffled: the p-th percentile is the sample of rank ceil(p·n).
        let mut micros: Vec<u64> = (1..=1000).rev().collect();
        micros.swap(3, 700);
        let l = LatencyMs::of(&mut micros);
        assert_eq!(l.p50, 0.5);
        assert_eq!(l.p90, 0.9);
        assert_eq!(l.p99, 0.99);
        assert_eq!(l.p999, 0.999);
        assert_eq!(l.max, 1.0);
        assert!((l.mean - 0.5005).abs() < 1e-9, "{}", l.mean);
        assert_eq!(LatencyMs::of(&mut []), LatencyMs::default());
    }

    #[test]
    fn only_loopback_http_urls_are_targets() {
        for url in [
            "http://127.0.0.1:7385/agents/web/hello?x=1",
            "http://127.1.2.3/",
            "http://[::1]:8080",
            "http://localhost/health",
        ] {
            assert!(Target::parse(url).is_ok(), "{url}");
        }
        // Refused before any connection is tried (documentation and private addresses, a
        // name, TLS).
        for url in [
            "http://192.0.2.1:7385/health",
            "http://10.0.0.1/",
            "http://[2001:db8::1]/",
            "http://example.test/",
            "https://127.0.0.1/",
            "not a url",
        ] {
            assert!(Target::parse(url).is_err(), "{url}");
        }
        let refused = Target::parse("http://192.0.2.1/").unwrap_err().to_string();
        assert!(refused.contains("this machine only"), "{refused}");
    }
}
