//! An in-process model server on loopback for the provider tests: it records every request
//! (headers and JSON body) and answers each with a [`Reply`] whose body is streamed frame by
//! frame over real HTTP, so the providers read true SSE. A [`Protocol`] names one provider's
//! frames, provider and request; its scripted exchanges (serve, stream, refuse, capture the
//! request) are what every protocol's tests share.

use agentlane_providers::{
    AssistantTurn, ModelProvider, ModelRequest, ProviderError, StreamAccumulator, StreamEvent,
};
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use futures::stream::{self, BoxStream, StreamExt};
use serde_json::Value;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// A response body, frame by frame (an `Err` breaks the connection there).
pub type Frames = BoxStream<'static, Result<String, std::io::Error>>;

/// The requests the server received, in order.
pub type Requests = Arc<Mutex<Vec<(HeaderMap, Value)>>>;

/// What the mock answers: a status, headers and a body stream.
pub struct Reply {
    pub status: StatusCode,
    pub headers: Vec<(&'static str, &'static str)>,
    pub body: Frames,
}

impl Reply {
    /// `200` with `content_type` and the frames as they come.
    pub fn stream(content_type: &'static str, body: Frames) -> Self {
        Reply {
            status: StatusCode::OK,
            headers: vec![("content-type", content_type)],
            body,
        }
    }

    /// A JSON body in one piece, with `status` and extra `headers`.
    pub fn json(status: u16, headers: Vec<(&'static str, &'static str)>, body: Value) -> Self {
        let mut all = vec![("content-type", "application/json")];
        all.extend(headers);
        Reply {
            status: StatusCode::from_u16(status).unwrap(),
            headers: all,
            body: stream::iter([Ok(body.to_string())]).boxed(),
        }
    }
}

/// A provider protocol as the mock serves it.
#[derive(Clone, Copy)]
pub struct Api {
    /// The route the provider posts to.
    route: &'static str,
    /// What the provider's base URL adds to the server's root.
    base_path: &'static str,
}

/// OpenAI Chat Completions: base URL `…/v1`.
pub const OPENAI: Api = Api {
    route: "/v1/chat/completions",
    base_path: "/v1",
};

/// Anthropic Messages: base URL the server root.
pub const ANTHROPIC: Api = Api {
    route: "/v1/messages",
    base_path: "",
};

#[derive(Clone)]
struct Mock {
    requests: Requests,
    reply: Arc<dyn Fn() -> Reply + Send + Sync>,
    /// Delay before the answer's headers.
    delay: Duration,
}

async fn answer(State(mock): State<Mock>, headers: HeaderMap, body: Bytes) -> Response {
    let json: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    mock.requests.lock().unwrap().push((headers, json));
    tokio::time::sleep(mock.delay).await;
    let reply = (mock.reply)();
    let mut response = Response::builder().status(reply.status);
    for (k, v) in reply.headers {
        response = response.header(k, v);
    }
    response.body(Body::from_stream(reply.body)).unwrap()
}

/// A running mock server.
pub struct Server {
    /// The base URL to configure the provider with.
    pub base_url: String,
    pub requests: Requests,
}

impl Server {
    /// The requests received so far (headers and JSON body), in order.
    pub fn received(&self) -> Vec<(HeaderMap, Value)> {
        self.requests.lock().unwrap().clone()
    }

    /// The one request received: there must have been exactly one.
    pub fn only_request(&self) -> (HeaderMap, Value) {
        let mut requests = self.received();
        assert_eq!(requests.len(), 1);
        requests.remove(0)
    }
}

/// A body of `frames`, each sent as it is.
pub fn frames_of(frames: Vec<String>) -> Frames {
    stream::iter(frames.into_iter().map(Ok)).boxed()
}

/// How one protocol frames what the tests need, and its provider and request under test: the
/// scripted exchanges below serve a fresh mock for the protocol, build the provider for it and
/// stream the request.
pub struct Protocol<P> {
    pub api: Api,
    /// A `200` streaming these frames with the protocol's content type.
    pub sse: fn(Frames) -> Reply,
    /// The start of an answer whose only event so far is a text delta `text`.
    pub text: fn(&str) -> Frames,
    /// A frame that carries nothing (keep-alive comment, ping).
    pub idle: fn() -> String,
    /// A complete answer.
    pub done: fn() -> Reply,
    /// The provider under test, configured for `server`.
    pub provider: fn(&Server) -> P,
    pub request: fn() -> ModelRequest,
}

/// What one request streamed: its events, the error that ended them if any, and the JSON body
/// the server received.
pub type Answer = (Vec<StreamEvent>, Option<ProviderError>, Value);

impl<P: ModelProvider> Protocol<P> {
    /// A reply streaming `frames` (the same to every request) as the protocol's event stream.
    pub fn reply(&self, frames: Vec<String>) -> impl Fn() -> Reply + Send + Sync + 'static {
        let sse = self.sse;
        move || sse(frames_of(frames.clone()))
    }

    /// Serves `reply` and streams the protocol's request to the end: the server (with the
    /// request it received), then what [`collect`] returned.
    pub async fn exchange(
        &self,
        reply: impl Fn() -> Reply + Send + Sync + 'static,
    ) -> (Server, Vec<StreamEvent>, Option<ProviderError>) {
        let server = serve(self.api, reply).await;
        let (events, error) = collect(&(self.provider)(&server), (self.request)()).await;
        (server, events, error)
    }

    /// What the protocol's request streams from a server answering with `frames`.
    pub async fn stream(&self, frames: Vec<String>) -> (Vec<StreamEvent>, Option<ProviderError>) {
        let (_, events, error) = self.exchange(self.reply(frames)).await;
        (events, error)
    }

    /// The error the protocol's request is refused with by a server answering with `reply`.
    pub async fn refused(
        &self,
        reply: impl Fn() -> Reply + Send + Sync + 'static,
    ) -> ProviderError {
        let server = serve(self.api, reply).await;
        refused(&(self.provider)(&server), (self.request)()).await
    }

    /// Streams each of `requests` in turn from one server answering with `frames`, which must
    /// receive exactly those requests: each one's [`Answer`].
    pub async fn each(&self, frames: Vec<String>, requests: Vec<ModelRequest>) -> Vec<Answer> {
        let server = serve(self.api, self.reply(frames)).await;
        let mut answers = Vec::new();
        for request in requests {
            answers.push(collect(&(self.provider)(&server), request).await);
        }
        let received = server.received();
        assert_eq!(received.len(), answers.len());
        answers
            .into_iter()
            .zip(received)
            .map(|((events, error), (_, body))| (events, error, body))
            .collect()
    }
}

/// Serves `api` on a free loopback port, answering every request with `reply()`.
pub async fn serve(api: Api, reply: impl Fn() -> Reply + Send + Sync + 'static) -> Server {
    serve_with(api, Duration::ZERO, reply).await
}

/// Like [`serve`], waiting `delay` before each answer's headers.
pub async fn serve_with(
    api: Api,
    delay: Duration,
    reply: impl Fn() -> Reply + Send + Sync + 'static,
) -> Server {
    let requests = Requests::default();
    let mock = Mock {
        requests: requests.clone(),
        reply: Arc::new(reply),
        delay,
    };
    let app = axum::Router::new()
        .route(api.route, axum::routing::post(answer))
        .with_state(mock);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    Server {
        base_url: format!("http://{addr}{}", api.base_path),
        requests,
    }
}

/// Streams `request` to the end: the events (without the [`StreamEvent::KeepAlive`] liveness
/// signals, see `transport::bytes_without_an_event_keep_the_stream_alive`), and the error that
/// ended the stream if any (nothing may follow an error).
pub async fn collect(
    provider: &dyn ModelProvider,
    request: ModelRequest,
) -> (Vec<StreamEvent>, Option<ProviderError>) {
    let mut stream = provider
        .stream(request, CancellationToken::new())
        .await
        .unwrap();
    let mut events = Vec::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(StreamEvent::KeepAlive) => {}
            Ok(e) => events.push(e),
            Err(e) => {
                assert!(stream.next().await.is_none(), "nothing may follow an error");
                return (events, Some(e));
            }
        }
    }
    (events, None)
}

/// The error `request` is refused with before any stream starts.
pub async fn refused(provider: &dyn ModelProvider, request: ModelRequest) -> ProviderError {
    match provider.stream(request, CancellationToken::new()).await {
        Ok(_) => panic!("the request was accepted"),
        Err(e) => e,
    }
}

/// The assistant turn the events make.
pub fn accumulate(events: &[StreamEvent]) -> AssistantTurn {
    let mut acc = StreamAccumulator::new();
    events.iter().for_each(|e| acc.push(e));
    acc.finish()
}

/// Signals when the server's body stream is dropped, i.e. the connection is gone.
pub struct DropSignal(pub Option<tokio::sync::oneshot::Sender<()>>);

impl Drop for DropSignal {
    fn drop(&mut self) {
        if let Some(tx) = self.0.take() {
            let _ = tx.send(());
        }
    }
}
