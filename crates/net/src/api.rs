//! The controller's HTTP/JSON API and its client. It listens on a Unix
//! socket (reachable from every network namespace, so a tenant's
//! application can subscribe to its misses) and optionally on TCP. Every
//! request needs `Authorization: Bearer <token>`, the token being the
//! contents of a file created with mode 0600; without it, or with another,
//! the answer is 401 and nothing changes. Each connection is served on its
//! own; one client (a peer address, or a uid on the socket) holds a
//! bounded share of them, and a connection must show the token soon after
//! it opens ([`ServeLimits`]), so idle connections cannot keep others out.
//!
//! | method and path | what |
//! |---|---|
//! | `GET /v1/status` | link, endpoints, totals |
//! | `GET /v1/channels` | channels with their counters |
//! | `POST /v1/channels` | add ([`ChannelRequest`]): 201, or 400/404/409 with the reason |
//! | `DELETE /v1/channels/N` | remove channel N (ids are never reused: a stale one is 404) |
//! | `GET /v1/actions` | the controller's log |
//! | `GET /v1/misses[?from=t0]` | misses as they happen, one JSON per line (streamed) |
use crate::controller::{Action, ApiError, ChannelRequest, ChannelState, ControllerHandle};
use crate::peers::{Listed, Peer, Peers};
use anyhow::{bail, Context, Result};
use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::{Method, Request, Response, StatusCode};
use serde::Serialize;
use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio_stream::StreamExt;

/// Where the controller of a running lab listens, by default.
pub const DEFAULT_SOCKET: &str = "/run/ontime/net-controller.sock";
/// Its token, by default.
pub const DEFAULT_TOKEN: &str = "/run/ontime/net-controller.token";
/// Largest request body.
const MAX_BODY: usize = 64 * 1024;

/// Creates a fresh random token in `path` (mode 0600, replacing an old one)
/// and returns it.
pub fn create_token_file(path: &Path) -> Result<String> {
    use std::io::{Read, Write};
    use std::os::unix::fs::OpenOptionsExt;
    let mut raw = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut raw))
        .context("cannot read /dev/urandom for the controller's token")?;
    let token: String = raw.iter().map(|b| format!("{b:02x}")).collect();
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let _ = std::fs::remove_file(path);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("cannot create the token file {}", path.display()))?;
    f.write_all(token.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(token)
}

/// Reads a token file, refusing one others may read.
pub fn read_token_file(path: &Path) -> Result<String> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path).with_context(|| {
        format!(
            "no token file {}: is a controller running (`ontime net controller` or a lab run with [net])? Give --token FILE otherwise",
            path.display()
        )
    })?;
    if meta.permissions().mode() & 0o077 != 0 {
        bail!(
            "{} is readable by others (mode {:o}): chmod 600 it",
            path.display(),
            meta.permissions().mode() & 0o777
        );
    }
    let t = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    Ok(t.trim().to_string())
}

/// Where the API listens.
#[derive(Clone, Debug)]
pub struct Listen {
    pub socket: PathBuf,
    pub tcp: Option<std::net::SocketAddr>,
}

/// The API's server thread; stops (and removes its socket) on drop.
pub struct ApiServer {
    stop: Option<tokio::sync::watch::Sender<bool>>,
    thread: Option<std::thread::JoinHandle<()>>,
    socket: PathBuf,
    pub tcp: Option<std::net::SocketAddr>,
    token_file: Option<PathBuf>,
}

impl ApiServer {
    /// Removes the token file too when the server stops (the token is
    /// good for this server only).
    pub fn owns_token_file(&mut self, path: &Path) {
        self.token_file = Some(path.to_path_buf());
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(true);
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.socket);
        if let Some(t) = &self.token_file {
            let _ = std::fs::remove_file(t);
        }
    }
}

struct Shared {
    token: String,
    controller: ControllerHandle,
    limits: ServeLimits,
}

/// What one API server lets its clients hold.
#[derive(Clone, Copy, Debug)]
pub struct ServeLimits {
    /// Connections open at once, over the socket and TCP together, so the
    /// controller's own descriptors (BPF maps, rings, the log) are never
    /// starved by clients. At the cap the oldest connection that has not
    /// shown the token is closed to make room; when every one has, more
    /// clients wait in the kernel's accept queue (no descriptor of ours).
    pub max_connections: usize,
    /// Connections one client may hold: one peer address over TCP, one uid
    /// over the Unix socket (root is one client, whichever process). At
    /// the limit the client's oldest connection without the token is
    /// closed for the new one; when all have shown it, the new one is
    /// answered 429 and closed. 64 lets one client follow the misses of
    /// each of the 63 channels at once and still ask for more.
    pub per_client: usize,
    /// A connection must send a request with the right token within this
    /// of being accepted, or it is closed: holding a connection takes the
    /// token, and a client with it asks at once.
    pub first_request: Duration,
    /// After that, a connection that sends no request head within this of
    /// its last answer is closed (a miss stream being answered is not
    /// idle).
    pub idle: Duration,
}

impl Default for ServeLimits {
    fn default() -> Self {
        ServeLimits {
            max_connections: 256,
            per_client: 64,
            first_request: Duration::from_secs(2),
            idle: Duration::from_secs(30),
        }
    }
}

/// Serves the API for `controller`; `token` is what requests must carry.
pub fn serve(listen: &Listen, token: String, controller: ControllerHandle) -> Result<ApiServer> {
    serve_with(listen, token, controller, ServeLimits::default())
}

/// [`serve`] with chosen [`ServeLimits`].
pub fn serve_with(
    listen: &Listen,
    token: String,
    controller: ControllerHandle,
    limits: ServeLimits,
) -> Result<ApiServer> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the API's runtime")?;
    if let Some(dir) = listen.socket.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let _ = std::fs::remove_file(&listen.socket);
    let (unix, tcp) = runtime.block_on(async {
        let unix = tokio::net::UnixListener::bind(&listen.socket)
            .with_context(|| format!("cannot listen on {}", listen.socket.display()))?;
        let tcp = match listen.tcp {
            Some(a) => Some(
                tokio::net::TcpListener::bind(a)
                    .await
                    .with_context(|| format!("cannot listen on {a}"))?,
            ),
            None => None,
        };
        anyhow::Ok((unix, tcp))
    })?;
    {
        use std::os::unix::fs::PermissionsExt;
        // The token guards it; the socket itself is for root and the lab's tenants.
        let _ = std::fs::set_permissions(&listen.socket, std::fs::Permissions::from_mode(0o600));
    }
    let tcp_addr = tcp.as_ref().and_then(|l| l.local_addr().ok());
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let gate = Gate {
        shared: Arc::new(Shared {
            token,
            controller,
            limits,
        }),
        slots: Arc::new(tokio::sync::Semaphore::new(limits.max_connections.max(1))),
        peers: Peers::new(limits.per_client),
    };
    let thread = std::thread::Builder::new()
        .name("ontime-netapi".into())
        .spawn(move || {
            runtime.block_on(async move {
                let mut tasks = vec![tokio::spawn(accept_unix(unix, gate.clone(), stop_rx.clone()))];
                if let Some(tcp) = tcp {
                    tasks.push(tokio::spawn(accept_tcp(tcp, gate, stop_rx)));
                }
                for t in tasks {
                    let _ = t.await;
                }
            });
            runtime.shutdown_timeout(Duration::from_millis(200));
        })
        .context("cannot start the API thread")?;
    Ok(ApiServer {
        stop: Some(stop_tx),
        thread: Some(thread),
        socket: listen.socket.clone(),
        tcp: tcp_addr,
        token_file: None,
    })
}

/// What the accept loops share: the API, the connection slots (the total
/// cap) and who holds them (the per-client limit).
#[derive(Clone)]
struct Gate {
    shared: Arc<Shared>,
    slots: Arc<tokio::sync::Semaphore>,
    peers: Arc<Peers>,
}

impl Gate {
    /// A slot for a connection just accepted. At the cap, the oldest
    /// connection that has not shown the token is closed to free one; when
    /// every connection has shown it, this waits for one to end (later
    /// clients wait in the accept queue meanwhile).
    async fn slot(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        if let Ok(p) = self.slots.clone().try_acquire_owned() {
            return Some(p);
        }
        self.peers.close_oldest_unauthenticated();
        self.slots.clone().acquire_owned().await.ok()
    }

    /// Lists an accepted connection under its client and serves it, or,
    /// with the client at its limit, answers 429 (what the socket takes at
    /// once; the server never waits on a refused client) and closes it.
    async fn admit<S>(&self, stream: S, peer: Peer, slot: tokio::sync::OwnedSemaphorePermit)
    where
        S: RefuseNow + tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        match self.peers.admit(peer) {
            Some((listed, close)) => connection(stream, self.shared.clone(), slot, listed, close),
            None => {
                stream.refuse_now(&too_many(self.shared.limits.per_client));
                drop((stream, slot));
            }
        }
        // The new connection reads its request before the next one is
        // accepted, so a queue of others behind it cannot close it to make
        // room before it could show the token.
        tokio::task::yield_now().await;
    }
}

/// After a failed accept (out of descriptors, say), a pause, so the loop
/// does not spin while the cause lasts.
const ACCEPT_RETRY: Duration = Duration::from_millis(50);

// A slot is taken after a connection is accepted, not before: a slot
// taken ahead, with every other held, closed the newest connection that
// had not yet shown its token (its request still in flight) to make room
// for one that had not come.
async fn accept_unix(l: tokio::net::UnixListener, gate: Gate, stop: tokio::sync::watch::Receiver<bool>) {
    let l = &l;
    let next = move || async move {
        let (stream, _) = l.accept().await?;
        // Over the socket a client is a uid: every process of root's is one.
        let peer = stream.peer_cred().map(|c| Peer::Uid(c.uid())).unwrap_or(Peer::Unknown);
        Ok((stream, peer))
    };
    accept_loop(next, gate, stop).await
}

async fn accept_tcp(l: tokio::net::TcpListener, gate: Gate, stop: tokio::sync::watch::Receiver<bool>) {
    let l = &l;
    let next = move || async move {
        let (stream, addr) = l.accept().await?;
        // An IPv4 client of a listener on [::] is the same client as over IPv4.
        Ok((stream, Peer::Ip(addr.ip().to_canonical())))
    };
    accept_loop(next, gate, stop).await
}

/// Accepts connections from `next` and admits each until `stop`.
async fn accept_loop<S, F, Fut>(mut next: F, gate: Gate, mut stop: tokio::sync::watch::Receiver<bool>)
where
    S: RefuseNow + tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = std::io::Result<(S, Peer)>>,
{
    loop {
        let (stream, peer) = tokio::select! {
            r = next() => match r {
                Ok(a) => a,
                Err(_) => {
                    tokio::time::sleep(ACCEPT_RETRY).await;
                    continue;
                }
            },
            _ = stop.changed() => return,
        };
        let slot = tokio::select! {
            s = gate.slot() => match s { Some(s) => s, None => return },
            _ = stop.changed() => return,
        };
        gate.admit(stream, peer, slot).await;
    }
}

/// A stream that can be handed a refusal without waiting.
trait RefuseNow {
    fn refuse_now(&self, answer: &[u8]);
}

impl RefuseNow for tokio::net::UnixStream {
    fn refuse_now(&self, answer: &[u8]) {
        let _ = self.try_write(answer);
    }
}

impl RefuseNow for tokio::net::TcpStream {
    fn refuse_now(&self, answer: &[u8]) {
        let _ = self.try_write(answer);
    }
}

/// The whole HTTP answer to a client that holds its share of connections,
/// each with the token shown.
fn too_many(per_client: usize) -> Vec<u8> {
    let message = format!(
        "this client already holds {per_client} connections to the controller, the most one client may: close one"
    );
    let mut body = serde_json::to_vec(&ErrorBody { error: &message }).unwrap_or_default();
    body.push(b'\n');
    let mut answer = format!(
        "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    answer.extend_from_slice(&body);
    answer
}

/// Serves one connection on its own task: whatever it does, it holds up
/// no other.
fn connection<S>(
    stream: S,
    shared: Arc<Shared>,
    slot: tokio::sync::OwnedSemaphorePermit,
    listed: Listed,
    mut close: tokio::sync::oneshot::Receiver<()>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        let _slot = slot;
        let limits = shared.limits;
        let listed = Arc::new(listed);
        let io = hyper_util::rt::TokioIo::new(stream);
        let (s2, l2) = (shared.clone(), listed.clone());
        let svc = hyper::service::service_fn(move |req| handle(req, s2.clone(), l2.clone()));
        // Errors are clients going away, speaking bad HTTP or idling past
        // the limit: the connection ends, the server goes on.
        let conn = hyper::server::conn::http1::Builder::new()
            .timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(limits.idle)
            .serve_connection(io, svc);
        tokio::pin!(conn);
        let first = tokio::time::sleep(limits.first_request);
        tokio::pin!(first);
        // Until it shows the token it is closed when its time for a first
        // request is up, or to make room for another.
        tokio::select! {
            _ = conn.as_mut() => return,
            _ = first.as_mut() => {
                if !listed.is_authenticated() {
                    return;
                }
            }
            _ = &mut close => return,
        }
        let _ = conn.await;
    });
}

type Body = BoxBody<Bytes, Infallible>;

#[derive(Serialize)]
struct ErrorBody<'a> {
    error: &'a str,
}

fn json<T: Serialize>(status: StatusCode, body: &T) -> Response<Body> {
    let mut bytes = serde_json::to_vec_pretty(body).unwrap_or_else(|_| b"{}".to_vec());
    bytes.push(b'\n');
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(bytes)).boxed())
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new()).boxed()))
}

fn error(status: u16, message: &str) -> Response<Body> {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut r = json(status, &ErrorBody { error: message });
    if status == StatusCode::UNAUTHORIZED {
        r.headers_mut()
            .insert("www-authenticate", hyper::header::HeaderValue::from_static("Bearer"));
    }
    r
}

fn api_error(e: ApiError) -> Response<Body> {
    error(e.status, &e.message)
}

/// Compares in time independent of where the strings differ.
fn same_token(given: &[u8], token: &[u8]) -> bool {
    given.len() == token.len() && given.iter().zip(token).fold(0u8, |d, (a, b)| d | (a ^ b)) == 0
}

async fn handle(
    req: Request<hyper::body::Incoming>,
    shared: Arc<Shared>,
    listed: Arc<Listed>,
) -> Result<Response<Body>, Infallible> {
    let given = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    match given {
        None => {
            return Ok(error(
                401,
                "missing bearer token (Authorization: Bearer <token file contents>)",
            ))
        }
        Some(t) if !same_token(t.as_bytes(), shared.token.as_bytes()) => {
            return Ok(error(401, "wrong token"));
        }
        Some(_) => {}
    }
    if !listed.authenticate() {
        // Closed to make room a moment before its request came in.
        return Ok(error(
            503,
            "this connection was closed to make room for others before its request arrived: connect again",
        ));
    }
    let c = &shared.controller;
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    let method = req.method().clone();
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    Ok(match (&method, parts.as_slice()) {
        (&Method::GET, ["v1", "status"]) => match c.status().await {
            Ok(s) => json(StatusCode::OK, &s),
            Err(e) => api_error(e),
        },
        (&Method::GET, ["v1", "channels"]) => match c.list().await {
            Ok(l) => json(StatusCode::OK, &l),
            Err(e) => api_error(e),
        },
        (&Method::POST, ["v1", "channels"]) => {
            let body = match http_body_util::Limited::new(req.into_body(), MAX_BODY).collect().await {
                Ok(b) => b.to_bytes(),
                Err(_) => return Ok(error(413, "request body too large or broken")),
            };
            let de = &mut serde_json::Deserializer::from_slice(&body);
            let r: ChannelRequest = match serde_path_to_error::deserialize(de) {
                Ok(r) => r,
                Err(e) => {
                    let field = e.path().to_string();
                    let msg = if field == "." {
                        format!("bad channel request: {}", e.into_inner())
                    } else {
                        format!("bad channel request: {field}: {}", e.into_inner())
                    };
                    return Ok(error(400, &msg));
                }
            };
            match c.add(r).await {
                Ok(s) => json(StatusCode::CREATED, &s),
                Err(e) => api_error(e),
            }
        }
        (&Method::DELETE, ["v1", "channels", id]) => match id.parse::<u64>() {
            Ok(id) => match c.remove(id).await {
                Ok(s) => json(StatusCode::OK, &s),
                Err(e) => api_error(e),
            },
            Err(_) => error(400, &format!("'{id}' is not a channel id")),
        },
        (&Method::GET, ["v1", "actions"]) => match c.actions().await {
            Ok(a) => json(StatusCode::OK, &a),
            Err(e) => api_error(e),
        },
        (&Method::GET, ["v1", "misses"]) => {
            let from = query
                .split('&')
                .find_map(|kv| kv.strip_prefix("from="))
                .map(str::to_string);
            let stream = tokio_stream::wrappers::BroadcastStream::new(c.subscribe()).filter_map(move |m| {
                let m = m.ok()?;
                if from.as_ref().is_some_and(|f| *f != m.from) {
                    return None;
                }
                let mut line = serde_json::to_vec(&m).ok()?;
                line.push(b'\n');
                Some(Ok::<_, Infallible>(Frame::data(Bytes::from(line))))
            });
            Response::builder()
                .status(StatusCode::OK)
                .header("content-type", "application/x-ndjson")
                .body(BodyExt::boxed(StreamBody::new(stream)))
                .unwrap_or_else(|_| Response::new(Full::new(Bytes::new()).boxed()))
        }
        (_, ["v1", "channels"]) | (_, ["v1", "channels", _]) | (_, ["v1", _]) => {
            error(405, &format!("{method} is not allowed on {path}"))
        }
        _ => error(
            404,
            &format!("no such endpoint {path}: see GET /v1/status, /v1/channels, /v1/actions, /v1/misses"),
        ),
    })
}

/// Where a client finds the controller.
#[derive(Clone, Debug)]
pub enum Target {
    Socket(PathBuf),
    Tcp(String),
}

/// The API's client (the `ontime net channel` verbs).
pub struct Client {
    target: Target,
    token: String,
    runtime: tokio::runtime::Runtime,
}

impl Client {
    pub fn new(target: Target, token: String) -> Result<Client> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("cannot start the client's runtime")?;
        Ok(Client { target, token, runtime })
    }

    async fn send(&self, req: Request<Full<Bytes>>) -> Result<Response<hyper::body::Incoming>> {
        macro_rules! over {
            ($stream:expr) => {{
                let io = hyper_util::rt::TokioIo::new($stream);
                let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
                    .await
                    .context("HTTP handshake with the controller")?;
                tokio::spawn(conn);
                sender
                    .send_request(req)
                    .await
                    .context("request to the controller")
            }};
        }
        match &self.target {
            Target::Socket(p) => over!(tokio::net::UnixStream::connect(p).await.with_context(|| format!(
                "cannot reach the controller at {}: is one running (`ontime net controller`, or a lab run with [net])?",
                p.display()
            ))?),
            Target::Tcp(a) => over!(tokio::net::TcpStream::connect(a.as_str())
                .await
                .with_context(|| format!("cannot reach the controller at {a}"))?),
        }
    }

    fn build(&self, method: Method, path: &str, body: Option<Vec<u8>>) -> Result<Request<Full<Bytes>>> {
        Request::builder()
            .method(method)
            .uri(path)
            .header("host", "ontime-controller")
            .header("authorization", format!("Bearer {}", self.token))
            // One request per connection: none is left open idle.
            .header("connection", "close")
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .context("building the request")
    }

    /// One request; (status, body).
    pub fn call(&self, method: Method, path: &str, body: Option<Vec<u8>>) -> Result<(u16, Vec<u8>)> {
        let req = self.build(method, path, body)?;
        self.runtime.block_on(async {
            let resp = self.send(req).await?;
            let status = resp.status().as_u16();
            let bytes = resp
                .into_body()
                .collect()
                .await
                .context("reading the controller's answer")?
                .to_bytes();
            Ok((status, bytes.to_vec()))
        })
    }

    /// A streamed GET: `line` gets each line until it returns false, the
    /// stream ends or `stop` is set.
    pub fn stream(
        &self,
        path: &str,
        stop: &std::sync::atomic::AtomicBool,
        mut line: impl FnMut(&[u8]) -> bool,
    ) -> Result<()> {
        let req = self.build(Method::GET, path, None)?;
        self.runtime.block_on(async {
            let resp = self.send(req).await?;
            let status = resp.status().as_u16();
            let mut body = resp.into_body();
            if status != 200 {
                let b = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                bail!("{}", error_text(status, &b));
            }
            let mut buf = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let frame = match tokio::time::timeout(Duration::from_millis(200), body.frame()).await {
                    Err(_) => continue,
                    Ok(None) => break,
                    Ok(Some(f)) => f.context("reading the stream")?,
                };
                if let Ok(data) = frame.into_data() {
                    buf.extend_from_slice(&data);
                    while let Some(n) = buf.iter().position(|&b| b == b'\n') {
                        let l: Vec<u8> = buf.drain(..=n).collect();
                        if !line(&l[..n]) {
                            return Ok(());
                        }
                    }
                }
            }
            Ok(())
        })
    }
}

/// An answer other than the one asked for: the controller's status and
/// its reason. A 4xx other than 401 is the request's fault (bad input, a
/// refusal, an unknown channel); the CLI exits 2 for those.
#[derive(Debug)]
pub struct Refused {
    pub status: u16,
    pub message: String,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.status, self.message)
    }
}

impl std::error::Error for Refused {}

impl Refused {
    /// The request was at fault (not the token, not the controller).
    pub fn is_bad_request(&self) -> bool {
        (400..500).contains(&self.status) && self.status != 401
    }
}

/// The API's routes, in one place for the client (the server matches the
/// same segments).
const CHANNELS: &str = "/v1/channels";
const ACTIONS: &str = "/v1/actions";
const MISSES: &str = "/v1/misses";

impl Client {
    fn typed<T: serde::de::DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        ok: u16,
    ) -> Result<T> {
        let (status, body) = self.call(method, path, body)?;
        if status != ok {
            let text = error_text(status, &body);
            let message = text.split_once(": ").map_or(text.clone(), |(_, m)| m.to_string());
            return Err(Refused { status, message }.into());
        }
        serde_json::from_slice(&body).context("the controller's answer is not what this version expects")
    }

    /// Asks for a channel: admitted (201), or [`Refused`] with the reason.
    pub fn add_channel(&self, r: &ChannelRequest) -> Result<ChannelState> {
        self.typed(Method::POST, CHANNELS, Some(serde_json::to_vec(r)?), 201)
    }

    /// Every channel held now, with its counters since admission.
    pub fn channels(&self) -> Result<Vec<ChannelState>> {
        self.typed(Method::GET, CHANNELS, None, 200)
    }

    /// Removes channel `id`; its final counters.
    pub fn remove_channel(&self, id: u64) -> Result<ChannelState> {
        self.typed(Method::DELETE, &format!("{CHANNELS}/{id}"), None, 200)
    }

    /// The controller's log: admissions, refusals, escalations.
    pub fn actions(&self) -> Result<Vec<Action>> {
        self.typed(Method::GET, ACTIONS, None, 200)
    }

    /// Every miss as it happens (of `from`'s channels, or all), one NDJSON
    /// line each to `line`, until it returns false or `stop` is set.
    pub fn follow_misses(
        &self,
        from: Option<&str>,
        stop: &std::sync::atomic::AtomicBool,
        line: impl FnMut(&[u8]) -> bool,
    ) -> Result<()> {
        let path = match from {
            Some(f) => format!("{MISSES}?from={f}"),
            None => MISSES.into(),
        };
        self.stream(&path, stop, line)
    }
}

/// An error answer as one line for people.
pub fn error_text(status: u16, body: &[u8]) -> String {
    let msg = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_string))
        .unwrap_or_else(|| String::from_utf8_lossy(body).trim().to_string());
    format!("{status}: {msg}")
}
