//! The server itself: header and body timeouts, the connection cap, the request timeout,
//! oversized paths and graceful shutdown.

use super::*;

/// How long one step of the slow-socket test may take before it counts as hung: a hang guard
/// only (an answer takes milliseconds and a close comes at the header timeout on an idle
/// machine).
const HANG_GUARD: Duration = Duration::from_secs(30);

/// Connects to `server` as a slow client: an even `i` sends half a request head, an odd one
/// nothing.
async fn slow_client(server: &LiveServer, i: usize) -> TcpStream {
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    if i.is_multiple_of(2) {
        stream
            .write_all(b"GET /v1/sessions/x HTTP/1.1\r\nhost: t\r\n")
            .await
            .unwrap();
    }
    stream
}

/// `key`'s request is answered (a 404 for a session that does not exist), however long it
/// takes up to the hang guard.
async fn answered(server: &LiveServer, key: &str) {
    let reply = tokio::time::timeout(HANG_GUARD, server.get("/v1/sessions/none", key))
        .await
        .expect("answered");
    assert_eq!(reply.status, 404, "{reply:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_sockets_are_closed_at_the_header_timeout_while_another_tenant_is_served() {
    // Order and eventual delivery only: a loaded machine makes every step slower, which none
    // of these assertions minds (the server's timer cannot close a socket before it connected
    // plus the timeout, and nothing else closes one).

    // GIVEN a server that waits a minute for request heads
    let patient = LiveServer::start(config(Limits {
        header_read_timeout_ms: 60_000,
        ..Limits::default()
    }))
    .await;
    // WHEN 200 clients connect: half send nothing, half send half a request head
    let mut slow = Vec::new();
    for i in 0..200 {
        slow.push(slow_client(&patient, i).await);
    }
    // THEN another tenant's requests are answered while they hang
    for _ in 0..10 {
        answered(&patient, BETA_KEY).await;
    }
    // AND every slow socket is still open after them (the server waits for the rest of
    // their heads; it did not shed them to serve the other tenant)
    for (i, stream) in slow.iter_mut().enumerate() {
        assert!(
            !closed_within(stream, Duration::from_millis(1)).await,
            "slow socket {i} closed before its head timed out"
        );
    }
    drop(slow);

    // GIVEN a server whose request heads must arrive within 400 ms
    let timeout = Duration::from_millis(400);
    let strict = LiveServer::start(config(Limits {
        header_read_timeout_ms: 400,
        ..Limits::default()
    }))
    .await;
    // WHEN 200 slow clients connect to it (each noting when it began to connect)
    let mut slow = Vec::new();
    for i in 0..200 {
        let connecting = Instant::now();
        slow.push((connecting, slow_client(&strict, i).await));
    }
    // THEN another tenant is still answered
    answered(&strict, BETA_KEY).await;
    // AND the server closes every slow socket, none of them before the timeout had passed
    // since it connected
    let guard = tokio::time::Instant::now() + HANG_GUARD;
    for (i, (connecting, stream)) in slow.iter_mut().enumerate() {
        let left = guard.saturating_duration_since(tokio::time::Instant::now());
        assert!(
            closed_within(stream, left).await,
            "slow socket {i} was never closed"
        );
        let open_for = connecting.elapsed();
        assert!(
            open_for >= timeout,
            "slow socket {i} was closed {open_for:?} after it connected, before the timeout"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connection_cap_holds_new_clients_until_a_connection_closes() {
    // GIVEN a server that keeps at most 4 connections open
    // (all of them from one address: no share per client here)
    let server = LiveServer::start(config(Limits {
        max_connections: 4,
        max_connections_per_client_percent: 0,
        ..Limits::default()
    }))
    .await;
    let mut idle = Vec::new();
    for _ in 0..4 {
        idle.push(TcpStream::connect(server.addr).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(100)).await;

    // WHEN a fifth client sends a whole request
    let mut fifth = TcpStream::connect(server.addr).await.unwrap();
    send_request(&mut fifth, "GET", "/healthz", None, "").await;

    // THEN it is not served while the four stay open
    let answered = tokio::time::timeout(Duration::from_millis(400), read_reply(&mut fifth)).await;
    assert!(answered.is_err(), "served over the cap: {answered:?}");

    // WHEN one of them closes, THEN the fifth is served
    drop(idle.pop());
    let mut fifth_again = fifth;
    let reply = tokio::time::timeout(Duration::from_secs(5), read_reply(&mut fifth_again))
        .await
        .expect("served once a slot freed");
    assert_eq!(reply.status, 200, "{reply:?}");
}

/// A connection to `server` from the loopback address `from` (Linux answers every 127.x.y.z).
async fn connect_from(server: &LiveServer, from: &str) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket
        .bind(std::net::SocketAddr::new(from.parse().unwrap(), 0))
        .unwrap();
    socket.connect(server.addr).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_holds_at_most_its_share_of_the_connections_and_another_is_served() {
    // GIVEN a server with 8 connections, a quarter of them (2) per client address
    let server = LiveServer::start(config(Limits {
        max_connections: 8,
        max_connections_per_client_percent: 25,
        ..Limits::default()
    }))
    .await;

    // WHEN one client holds 2 idle connections and opens a third
    let mut idle = vec![
        connect_from(&server, "127.0.0.1").await,
        connect_from(&server, "127.0.0.1").await,
    ];
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut third = connect_from(&server, "127.0.0.1").await;
    send_request(&mut third, "GET", "/healthz", None, "").await;

    // THEN the third is answered 429 at once and closed
    let refused = tokio::time::timeout(Duration::from_secs(5), read_reply(&mut third))
        .await
        .expect("answered at once");
    refused.assert_error(429, "rate_limited");
    assert!(refused.body.contains("at most 2"), "{refused:?}");
    assert_eq!(refused.header("retry-after").as_deref(), Some("1"));

    // AND a client from another address is served meanwhile
    let mut other = connect_from(&server, "127.0.0.2").await;
    send_request(&mut other, "GET", "/healthz", None, "").await;
    let reply = tokio::time::timeout(Duration::from_secs(5), read_reply(&mut other))
        .await
        .expect("served");
    assert_eq!(reply.status, 200, "{reply:?}");

    // WHEN the first client closes one, THEN its next connection is served
    drop(idle.pop());
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut again = connect_from(&server, "127.0.0.1").await;
    send_request(&mut again, "GET", "/healthz", None, "").await;
    let reply = tokio::time::timeout(Duration::from_secs(5), read_reply(&mut again))
        .await
        .expect("served once it closed one");
    assert_eq!(reply.status, 200, "{reply:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_stalls_answers_408_and_nothing_is_accepted() {
    // GIVEN a server that gives request bodies 300 ms
    let server = LiveServer::start(config(Limits {
        request_body_timeout_ms: 300,
        ..Limits::default()
    }))
    .await;

    // WHEN a client announces 200 bytes of body and sends 20
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let head = format!(
        "POST /v1/agent HTTP/1.1\r\nhost: t\r\nconnection: close\r\nauthorization: Bearer {ACME_KEY}\r\ncontent-type: application/json\r\ncontent-length: 200\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(br#"{"sessionKey":"main","#).await.unwrap();
    let started = Instant::now();
    let reply = tokio::time::timeout(Duration::from_secs(5), read_reply(&mut stream))
        .await
        .expect("answered");

    // THEN it gets 408 in the error shape, after about the timeout, and no session exists
    reply.assert_error(408, "timeout");
    assert!(started.elapsed() >= Duration::from_millis(250));
    server
        .get("/v1/sessions/main", ACME_KEY)
        .await
        .assert_error(404, "not_found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_path_answers_414_in_the_error_shape() {
    let server = LiveServer::start(config(Limits::default())).await;
    let key = "k".repeat(20_000);
    let reply = server
        .get(&format!("/v1/sessions/{key}/transcript"), ACME_KEY)
        .await;
    reply.assert_error(414, "uri_too_long");
    let query = server
        .get(
            &format!("/v1/runs/r/events?after={}", "9".repeat(9000)),
            ACME_KEY,
        )
        .await;
    query.assert_error(414, "uri_too_long");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_a_request_in_flight_finish_and_then_stops_accepting() {
    // GIVEN a wait in flight on a running run
    let mut server = LiveServer::start(config(Limits {
        shutdown_grace_ms: 5_000,
        ..Limits::default()
    }))
    .await;
    let run_id = server.submit(ACME_KEY, "bye", "hi").await;
    let fence = server
        .commit_status(&acme(), &run_id, RunStatus::Running)
        .await;
    let addr = server.addr;
    let body = json!({"runId": run_id, "timeoutMs": 10_000}).to_string();
    let wait = tokio::spawn(async move {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        send_request(&mut stream, "POST", "/v1/agent.wait", Some(ACME_KEY), &body).await;
        read_reply(&mut stream).await
    });
    tokio::time::sleep(Duration::from_millis(200)).await;

    // WHEN the server is asked to stop, and the run then ends
    server.shutdown();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let refused = TcpStream::connect(addr).await;
    let run = server.run(&acme(), &run_id).await;
    server.commit_run(&fence, run, RunStatus::Ok).await;

    // THEN the wait in flight still gets its answer, the server ends, and no new connection
    // is taken
    let reply = tokio::time::timeout(Duration::from_secs(5), wait)
        .await
        .expect("wait answered")
        .unwrap();
    assert_eq!(reply.json()["status"], "ok", "{reply:?}");
    let task = server.task.take().unwrap();
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("server ended")
        .unwrap()
        .unwrap();
    assert!(refused.is_err(), "a connection was accepted after shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_over_the_request_timeout_answers_408_but_an_sse_stream_lives_on() {
    // GIVEN a 300 ms request timeout and a store whose run reads take 1 s
    let limits = Limits {
        request_timeout_ms: 300,
        ..Limits::default()
    };
    let slow = LiveServer::start_over(config(limits.clone()), |inner| {
        Arc::new(Layered(CountingStore {
            inner,
            reads: Arc::default(),
            delay: Duration::from_secs(1),
        }))
    })
    .await;

    // WHEN a client reads a run, THEN it gets 408 in the error shape after about 300 ms
    let started = Instant::now();
    slow.get("/v1/runs/run_x", ACME_KEY)
        .await
        .assert_error(408, "timeout");
    assert!(
        started.elapsed() < Duration::from_millis(900),
        "{:?}",
        started.elapsed()
    );

    // GIVEN the same timeout on a normal store, and an SSE stream on a running run
    let server = LiveServer::start(config(limits)).await;
    let run_id = server.submit(ACME_KEY, "long", "hi").await;
    let fence = server
        .commit_status(&acme(), &run_id, RunStatus::Running)
        .await;
    let mut stream = open_stream(&server, ACME_KEY, &run_id).await.unwrap();

    // WHEN the run ends after a second, THEN the stream, past the timeout, still gets the end
    tokio::time::sleep(Duration::from_secs(1)).await;
    let run = server.run(&acme(), &run_id).await;
    server.commit_run(&fence, run, RunStatus::Ok).await;
    let mut seen = String::new();
    let mut buf = [0u8; 4096];
    while !seen.contains("event: end") {
        let n = tokio::time::timeout(
            Duration::from_secs(3),
            tokio::io::AsyncReadExt::read(&mut stream, &mut buf),
        )
        .await
        .expect("the end arrives")
        .unwrap();
        assert!(n > 0, "stream closed early: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
}
