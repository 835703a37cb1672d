//! The usual NATS connection options (server URLs of a cluster,
//! user/password, a credentials or nkey seed file, TLS), the streams and
//! buckets the fleet uses, made where missing.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use async_nats::jetstream::{self, object_store, stream};
use serde::{Deserialize, Serialize};

use crate::wire;

/// How to reach NATS: on the command line of `analyse` and `fleet`, in
/// the `[nats]` table of an agent's config.
#[derive(clap::Args, Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NatsArgs {
    /// NATS server URL(s) of one cluster, comma-separated
    #[arg(
        long = "nats",
        value_name = "URL",
        value_delimiter = ',',
        default_value = "nats://127.0.0.1:4222"
    )]
    pub servers: Vec<String>,
    /// A credentials file (JWT and nkey seed, as `nsc` writes it)
    #[arg(long, value_name = "FILE")]
    pub creds: Option<PathBuf>,
    /// A file holding an nkey seed (SU...)
    #[arg(long, value_name = "FILE")]
    pub nkey: Option<PathBuf>,
    /// User name (with --password-file or ONTIME_NATS_PASSWORD)
    #[arg(long)]
    pub user: Option<String>,
    /// A file holding the user's password (not on the command line, where
    /// `ps` shows it); ONTIME_NATS_PASSWORD also works
    #[arg(long, value_name = "FILE")]
    pub password_file: Option<PathBuf>,
    /// CA certificate(s) to verify the server with; TLS is then required
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// Client certificate and key for TLS client authentication
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
}

impl Default for NatsArgs {
    fn default() -> Self {
        NatsArgs {
            servers: vec!["nats://127.0.0.1:4222".into()],
            creds: None,
            nkey: None,
            user: None,
            password_file: None,
            tls_ca: None,
            tls_cert: None,
            tls_key: None,
        }
    }
}

impl NatsArgs {
    /// The connect options. `retry`: keep trying in the background (an
    /// agent starts, and spools, while the server is away) instead of
    /// failing at once.
    pub async fn connect(&self, name: &str, retry: bool) -> Result<async_nats::Client> {
        let mut o = async_nats::ConnectOptions::new()
            .name(name)
            .connection_timeout(Duration::from_secs(5))
            .max_reconnects(None);
        if let Some(user) = &self.user {
            let password = match (&self.password_file, std::env::var("ONTIME_NATS_PASSWORD")) {
                (Some(f), _) => std::fs::read_to_string(f)
                    .with_context(|| format!("cannot read the password file {}", f.display()))?
                    .trim_end_matches(['\n', '\r'])
                    .to_string(),
                (None, Ok(p)) => p,
                (None, Err(_)) => {
                    anyhow::bail!("--user {user} needs a password: --password-file FILE or ONTIME_NATS_PASSWORD")
                }
            };
            o = o.user_and_password(user.clone(), password);
        }
        if let Some(f) = &self.nkey {
            let seed = std::fs::read_to_string(f)
                .with_context(|| format!("cannot read the nkey seed file {}", f.display()))?;
            o = o.nkey(seed.trim().to_string());
        }
        if let Some(f) = &self.creds {
            o = o
                .credentials_file(f)
                .await
                .with_context(|| format!("cannot read the credentials file {}", f.display()))?;
        }
        if let Some(ca) = &self.tls_ca {
            o = o.add_root_certificates(ca.clone()).require_tls(true);
        }
        if let (Some(c), Some(k)) = (&self.tls_cert, &self.tls_key) {
            o = o.add_client_certificate(c.clone(), k.clone());
        }
        if retry {
            o = o.retry_on_initial_connect();
        }
        let servers: Vec<async_nats::ServerAddr> = self
            .servers
            .iter()
            .map(|s| s.parse().with_context(|| format!("--nats {s}: not a NATS URL")))
            .collect::<Result<_>>()?;
        o.connect(servers).await.map_err(|e| {
            let hint = match e.kind() {
                async_nats::ConnectErrorKind::AuthorizationViolation => {
                    " (the server refused the credentials: check --user/--password-file, --creds or --nkey)"
                }
                async_nats::ConnectErrorKind::Tls => " (TLS: check --tls-ca, --tls-cert and --tls-key)",
                _ => " (is nats-server running there with JetStream on? `nats-server -js`)",
            };
            anyhow::anyhow!("cannot connect to NATS at {}: {e}{hint}", self.servers.join(","))
        })
    }
}

/// The smallest size bound a stream is made with when the server has less
/// storage to give than the usual bounds.
const MIN_STREAM_BYTES: i64 = 16 << 20;

/// Finds or makes the bounded streams `configs` together. JetStream
/// reserves every stream's `max_bytes` against the server's file store (by
/// default 75 % of the disk that was free when it started), so on a small
/// disk the usual bounds are refused: all are halved together until the
/// server takes them (a stream made larger on an earlier try is shrunk),
/// and the operator is told the bounds.
async fn within_storage(js: &jetstream::Context, configs: &[stream::Config]) -> Result<()> {
    use async_nats::jetstream::context::CreateStreamErrorKind;
    use async_nats::jetstream::ErrorCode;
    let refused = |e: &async_nats::jetstream::context::CreateStreamError| {
        matches!(e.kind(), CreateStreamErrorKind::JetStream(j)
            if [ErrorCode::STORAGE_RESOURCES_EXCEEDED, ErrorCode::INSUFFICIENT_RESOURCES].contains(&j.error_code()))
    };
    'halving: for halvings in 0..32u32 {
        for c in configs {
            let config = stream::Config {
                max_bytes: c.max_bytes >> halvings,
                ..c.clone()
            };
            if config.max_bytes < MIN_STREAM_BYTES {
                anyhow::bail!(
                    "cannot make the stream {}: the NATS server has no storage for even {} MiB (raise JetStream's max_file_store)",
                    config.name,
                    MIN_STREAM_BYTES >> 20
                );
            }
            match js.get_or_create_stream(config.clone()).await {
                Ok(s) if halvings > 0 && s.cached_info().config.max_bytes > config.max_bytes => {
                    js.update_stream(&config)
                        .await
                        .map_err(|e| anyhow::anyhow!("cannot shrink the stream {}: {e}", config.name))?;
                }
                Ok(_) => {}
                Err(e) if refused(&e) => continue 'halving,
                Err(e) => return Err(anyhow::anyhow!("cannot make the stream {}: {e}", config.name)),
            }
        }
        if halvings > 0 {
            let bounds: Vec<String> = configs
                .iter()
                .map(|c| format!("{} {} MiB", c.name, (c.max_bytes >> halvings) >> 20))
                .collect();
            ontime_core::errln!(
                "ontime: the NATS server has less storage to give than the fleet's usual bounds: {} (raise JetStream's max_file_store for more history)",
                bounds.join(", ")
            );
        }
        return Ok(());
    }
    anyhow::bail!("the NATS server refused every size of the fleet's streams")
}

/// The streams and buckets, made if missing (idempotent: every agent and
/// worker calls this at start).
pub async fn ensure(js: &jetstream::Context) -> Result<()> {
    // De-duplication by window id over an hour: an agent that retries a
    // window it published before an outage (or before it was killed) is
    // not counted twice, nor a worker that publishes a result twice.
    let dedup = Duration::from_secs(3600);
    js.get_or_create_stream(stream::Config {
        name: wire::WINDOWS_STREAM.into(),
        subjects: vec![wire::WINDOWS_SUBJECTS.into()],
        retention: stream::RetentionPolicy::WorkQueue,
        storage: stream::StorageType::File,
        duplicate_window: dedup,
        ..Default::default()
    })
    .await
    .map_err(|e| anyhow::anyhow!("cannot make the stream {}: {e}", wire::WINDOWS_STREAM))?;
    within_storage(
        js,
        &[
            stream::Config {
                name: wire::RESULTS_STREAM.into(),
                subjects: vec![wire::RESULTS_SUBJECTS.into()],
                storage: stream::StorageType::File,
                duplicate_window: dedup,
                // A year of 30 s windows of 100 hosts is ~100 M results:
                // bound by age and size instead of keeping everything.
                max_age: Duration::from_secs(30 * 24 * 3600),
                max_bytes: 8 << 30,
                ..Default::default()
            },
            stream::Config {
                name: wire::DEAD_STREAM.into(),
                subjects: vec![wire::DEAD_SUBJECTS.into()],
                storage: stream::StorageType::File,
                max_age: Duration::from_secs(30 * 24 * 3600),
                max_bytes: 1 << 30,
                ..Default::default()
            },
        ],
    )
    .await?;
    for (bucket, age) in [
        // A window waits here until analysed; one a worker failed to
        // delete (killed after its ack) ages out.
        (wire::WINDOW_BUCKET, Duration::from_secs(24 * 3600)),
        (wire::RESULT_BUCKET, Duration::from_secs(30 * 24 * 3600)),
    ] {
        if js.get_object_store(bucket).await.is_err() {
            js.create_object_store(object_store::Config {
                bucket: bucket.into(),
                max_age: age,
                storage: stream::StorageType::File,
                ..Default::default()
            })
            .await
            .map_err(|e| anyhow::anyhow!("cannot make the object store {bucket}: {e}"))?;
        }
    }
    js.get_or_create_stream(stream::Config {
        name: wire::HISTORY_STREAM.into(),
        subjects: vec![wire::HISTORY_SUBJECTS.into()],
        storage: stream::StorageType::File,
        max_messages_per_subject: 1,
        ..Default::default()
    })
    .await
    .map_err(|e| anyhow::anyhow!("cannot make the stream {}: {e}", wire::HISTORY_STREAM))?;
    Ok(())
}
