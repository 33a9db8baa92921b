//! `agentlane bench-abuse`: does one tenant's abuse slow another tenant down? (issue 12 §4)
//!
//! Starts `agentlane serve` (this binary, embedded backend, a fresh data directory) against a
//! small in-process OpenAI-compatible model server that answers at once, except for the
//! message `hold`, whose stream sends one chunk and then stays open. Then it measures tenant
//! B's turn latency (submit, then `agent.wait` until the run ends) in three phases:
//!
//! 1. idle;
//! 2. while tenant A holds `--streams` SSE event streams (default 5,000) on a run that never
//!    ends (A's stream cap and the connection cap are raised for the run);
//! 3. while A keeps `--slow-sockets` (default 1,000) slow-loris connections open: each sends
//!    a partial request head and one more header byte a second, and reconnects whenever the
//!    server's header timeout closes it.
//!
//! It prints one JSON object: per phase the latency percentiles (ms), and the ratios of each
//! abuse phase's median and p95 to idle's. The process needs about `streams + slow-sockets`
//! file descriptors (and the server as many).

use anyhow::{Context, bail};
use axum::Router;
use axum::body::Body;
use axum::response::Response;
use axum::routing::post;
use clap::Args;
use futures::StreamExt;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

/// Tenant A (the abuser) and B (the bystander), with their keys.
const ABUSER: (&str, &str) = ("abuser", "bench-abuser-key-0123456789");
const BYSTANDER: (&str, &str) = ("bystander", "bench-bystander-key-0123456789");

/// Options of `agentlane bench-abuse` (how many streams and slow-loris sockets tenant A opens).
#[derive(Args, Debug)]
pub struct AbuseArgs {
    /// SSE event streams tenant A holds open in phase 2.
    #[arg(long, default_value_t = 5000)]
    pub streams: usize,
    /// Slow-loris sockets tenant A keeps open in phase 3.
    #[arg(long, default_value_t = 1000)]
    pub slow_sockets: usize,
    /// Tenant B turns measured per phase (one after the other).
    #[arg(long, default_value_t = 40)]
    pub samples: usize,
    /// Each phase samples for at least this long (past the server's 10 s header timeout, so
    /// the slow sockets' reconnects are part of phase 3).
    #[arg(long, default_value_t = 15)]
    pub min_phase_secs: u64,
    /// Lane workers of the server.
    #[arg(long, default_value_t = 4)]
    pub workers: usize,
}

/// The in-process model server: answers every chat completion at once with a short reply,
/// except a request whose last message is `hold`, which gets one chunk and then an open stream.
async fn model_server() -> anyhow::Result<String> {
    async fn complete(body: String) -> Response {
        let hold = body.contains("\"hold\"");
        let chunk = |delta: Value, finish: Value| {
            let data = json!({
                "id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 0,
                "model": "bench",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            });
            Ok::<_, std::convert::Infallible>(format!("data: {data}\n\n"))
        };
        let first = vec![chunk(
            json!({"role": "assistant", "content": "Hello"}),
            Value::Null,
        )];
        let stream: futures::stream::BoxStream<'static, _> = if hold {
            futures::stream::iter(first)
                .chain(futures::stream::pending())
                .boxed()
        } else {
            let rest = vec![
                chunk(json!({"content": " there."}), Value::Null),
                chunk(json!({}), json!("stop")),
                Ok("data: [DONE]\n\n".to_owned()),
            ];
            futures::stream::iter(first.into_iter().chain(rest)).boxed()
        };
        Response::builder()
            .header("content-type", "text/event-stream")
            .body(Body::from_stream(stream))
            .unwrap_or_default()
    }
    let app = Router::new().route("/v1/chat/completions", post(complete));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(format!("http://{addr}/v1"))
}

/// `agentlane serve` as a child; killed on drop.
struct ServeChild {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Drop for ServeChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_serve(model_url: &str, args: &AbuseArgs) -> anyhow::Result<ServeChild> {
    let dir = tempfile::Builder::new()
        .prefix("agentlane-abuse-")
        .tempdir()?;
    let config = dir.path().join("agentlane.toml");
    // Room for every abusing socket: the bench measures the tenant caps and the header timeout,
    // so the per-client share is off (the abuser connects from its own loopback address anyway,
    // see `abuser_connect`, so a share would not count B's connections with A's).
    let connections = args.streams + args.slow_sockets + 1024;
    std::fs::write(
        &config,
        format!(
            "[limits]\nmax_connections = {connections}\n\
             max_connections_per_client_percent = 100\n\n\
             [limits.tenants.{}]\nmax_event_streams = {}\n",
            ABUSER.0,
            args.streams + 16
        ),
    )?;
    let exe = std::env::current_exe().context("locating this binary")?;
    let mut child = Command::new(exe)
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path().join("data"))
        .args(["--workers", &args.workers.to_string()])
        .env("AGENTLANE_CONFIG", &config)
        .env(
            "AGENTLANE_API_KEYS",
            format!("{}:{},{}:{}", ABUSER.0, ABUSER.1, BYSTANDER.0, BYSTANDER.1),
        )
        .env("OPENAI_BASE_URL", model_url)
        .env("OPENAI_API_KEY", "bench")
        .env("AGENTLANE_MODEL", "openai/bench")
        .env("AGENTLANE_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("starting agentlane serve")?;
    let stdout = child.stdout.take().context("serve's stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let url = loop {
        let Some(line) = lines.next() else {
            bail!("serve exited before listening");
        };
        if let Some(url) = line?.strip_prefix("agentlane listening on ") {
            break url.trim().to_owned();
        }
    };
    // Keep draining stdout so the child never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Ok(ServeChild {
        child,
        url,
        _dir: dir,
    })
}

/// One tenant-B turn: submit, then `agent.wait` until it ends; its wall time.
async fn b_turn(http: &reqwest::Client, url: &str, session: &str) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let accepted: Value = http
        .post(format!("{url}/v1/agent"))
        .bearer_auth(BYSTANDER.1)
        .json(&json!({"sessionKey": session, "message": "hello"}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let run_id = accepted["runId"].as_str().context("runId")?;
    let waited: Value = http
        .post(format!("{url}/v1/agent.wait"))
        .bearer_auth(BYSTANDER.1)
        .json(&json!({"runId": run_id, "timeoutMs": 60_000}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    if waited["status"] != "ok" {
        bail!("tenant B's turn did not end ok: {waited}");
    }
    Ok(started.elapsed())
}

/// At least `samples` B turns one after the other, on a few sessions, for at least
/// `min_time`; latency percentiles in ms.
async fn measure(
    http: &reqwest::Client,
    url: &str,
    phase: &str,
    samples: usize,
    min_time: Duration,
) -> anyhow::Result<Value> {
    let mut ms = Vec::with_capacity(samples);
    let started = Instant::now();
    while ms.len() < samples.max(1) || started.elapsed() < min_time {
        let d = b_turn(http, url, &format!("b-{phase}-{}", ms.len() % 4)).await?;
        ms.push(d.as_secs_f64() * 1000.0);
        // Paced: a bystander's turns, not a load test.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let samples = ms.len();
    ms.sort_by(f64::total_cmp);
    let pct = |p: f64| ms[((ms.len() as f64 - 1.0) * p).round() as usize];
    Ok(json!({
        "samples": samples,
        "p50_ms": pct(0.5), "p95_ms": pct(0.95), "max_ms": pct(1.0),
    }))
}

/// Opens one SSE stream of tenant A on `run_id` over a raw socket; `true` once the server
/// answered 200 (the stream then stays open, drained, until `stop`).
/// The abuser's address on loopback, apart from B's (127.0.0.1): a per-address limit of the
/// server then tells them apart, as it would two clients.
const ABUSER_ADDR: std::net::Ipv4Addr = std::net::Ipv4Addr::new(127, 0, 0, 2);

/// A connection of the abuser to `addr`: from [`ABUSER_ADDR`] where the system has it (Linux
/// answers every 127.x.y.z), else from the default address.
async fn abuser_connect(addr: &str) -> std::io::Result<TcpStream> {
    let target: std::net::SocketAddr = match addr.parse() {
        Ok(target) => target,
        Err(_) => return TcpStream::connect(addr).await,
    };
    if target.ip().is_loopback() && target.is_ipv4() {
        let socket = tokio::net::TcpSocket::new_v4()?;
        if socket.bind((ABUSER_ADDR, 0).into()).is_ok()
            && let Ok(stream) = socket.connect(target).await
        {
            return Ok(stream);
        }
    }
    TcpStream::connect(target).await
}

async fn hold_stream(addr: &str, run_id: &str, stop: CancellationToken) -> anyhow::Result<()> {
    let mut socket = abuser_connect(addr).await?;
    let request = format!(
        "GET /v1/runs/{run_id}/events HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\n\
         Accept: text/event-stream\r\n\r\n",
        ABUSER.1
    );
    socket.write_all(request.as_bytes()).await?;
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = socket.read(&mut buf).await?;
        if n == 0 {
            bail!("the server closed an SSE stream before answering");
        }
        head.extend_from_slice(&buf[..n]);
    }
    if !head.starts_with(b"HTTP/1.1 200") {
        bail!(
            "SSE stream refused: {}",
            String::from_utf8_lossy(&head[..head.len().min(200)])
        );
    }
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                read = socket.read(&mut buf) => match read {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                },
            }
        }
    });
    Ok(())
}

/// Keeps one slow-loris connection open until `stop`: a partial request head, then one header
/// byte a second; reconnects when the server closes it. Counts (re)connections.
async fn slow_loris(addr: String, stop: CancellationToken, connects: Arc<AtomicU64>) {
    while !stop.is_cancelled() {
        let Ok(mut socket) = abuser_connect(&addr).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        connects.fetch_add(1, Ordering::Relaxed);
        if socket
            .write_all(b"GET /v1/sessions/x HTTP/1.1\r\nHost: bench\r\nX-Slow: ")
            .await
            .is_err()
        {
            continue;
        }
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
            if socket.write_all(b"a").await.is_err() {
                break;
            }
        }
    }
}

/// Runs the three phases against an in-process server and prints tenant B's latency ratios as
/// JSON; fails when the server cannot be started.
pub async fn run(args: AbuseArgs) -> anyhow::Result<()> {
    let model_url = model_server().await?;
    let serve = start_serve(&model_url, &args)?;
    let url = serve.url.clone();
    let addr = url.trim_start_matches("http://").to_owned();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(90))
        .build()?;

    // Warm up, then phase 1: idle.
    let min_time = Duration::from_secs(args.min_phase_secs);
    let phase = |what: &str| crate::progress::spinner(true, what);
    let spinner = phase("idle: tenant B's turns");
    measure(&http, &url, "warmup", 5, Duration::ZERO).await?;
    let idle = measure(&http, &url, "idle", args.samples, min_time).await?;
    spinner.finish_and_clear();

    // Phase 2: A holds `streams` SSE streams on a run that never ends.
    let hold: Value = http
        .post(format!("{url}/v1/agent"))
        .bearer_auth(ABUSER.1)
        .json(&json!({"sessionKey": "a-hold", "message": "hold"}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let hold_run = hold["runId"].as_str().context("runId")?.to_owned();
    let streams_stop = CancellationToken::new();
    let spinner = phase(&format!(
        "streams: A opens {} SSE streams, B's turns",
        args.streams
    ));
    let opened = Instant::now();
    let results: Vec<anyhow::Result<()>> = futures::stream::iter(0..args.streams)
        .map(|_| hold_stream(&addr, &hold_run, streams_stop.clone()))
        .buffer_unordered(64)
        .collect()
        .await;
    let held = results.iter().filter(|r| r.is_ok()).count();
    if let Some(Err(e)) = results.iter().find(|r| r.is_err()) {
        eprintln!(
            "bench-abuse: {} of {} streams failed, e.g. {e:#}",
            args.streams - held,
            args.streams
        );
    }
    let open_secs = opened.elapsed().as_secs_f64();
    let streams = measure(&http, &url, "streams", args.samples, min_time).await?;
    spinner.finish_and_clear();
    streams_stop.cancel();
    tokio::time::sleep(Duration::from_secs(1)).await;

    // Phase 3: A keeps `slow_sockets` slow-loris connections open.
    let spinner = phase(&format!(
        "slow sockets: A holds {} slow-loris connections, B's turns",
        args.slow_sockets
    ));
    let loris_stop = CancellationToken::new();
    let connects = Arc::new(AtomicU64::new(0));
    for _ in 0..args.slow_sockets {
        tokio::spawn(slow_loris(
            addr.clone(),
            loris_stop.clone(),
            connects.clone(),
        ));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let slow = measure(&http, &url, "slow", args.samples, min_time).await?;
    spinner.finish_and_clear();
    loris_stop.cancel();

    let ratio = |phase: &Value, key: &str| {
        let (a, b) = (phase[key].as_f64(), idle[key].as_f64());
        match (a, b) {
            (Some(a), Some(b)) if b > 0.0 => json!((a / b * 100.0).round() / 100.0),
            _ => Value::Null,
        }
    };
    let report = json!({
        "workers": args.workers,
        "idle": idle,
        "sse_streams": {
            "held": held, "asked": args.streams, "open_secs": (open_secs * 10.0).round() / 10.0,
            "latency": streams,
            "p50_ratio": ratio(&streams, "p50_ms"), "p95_ratio": ratio(&streams, "p95_ms"),
        },
        "slow_sockets": {
            "sockets": args.slow_sockets, "connects": connects.load(Ordering::Relaxed),
            "latency": slow,
            "p50_ratio": ratio(&slow, "p50_ms"), "p95_ratio": ratio(&slow, "p95_ms"),
        },
    });
    println!("{}", serde_json::to_string_pretty(&report)?);
    drop(serve);
    Ok(())
}
