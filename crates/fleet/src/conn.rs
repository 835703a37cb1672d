//! The usual NATS connection options (server URLs of a cluster,
//! user/password, a credentials or nkey seed file, TLS), the streams and
//! buckets the fleet uses, made where missing.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use async_nats::jetstream::{self, object_store, stream};
use ontime_core::bad_input;
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

/// Where the connection options were given, for errors that name them:
/// flags of `analyse`, `fleet` and `plan`, or the `[nats]` table of an
/// agent's config.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    Flags,
    Config,
}

impl Origin {
    /// The flag or key that gives `field` (a field of [`NatsArgs`]).
    pub fn name(self, field: &str) -> String {
        match (self, field) {
            (Origin::Flags, "servers") => "--nats".into(),
            (Origin::Flags, f) => format!("--{}", f.replace('_', "-")),
            (Origin::Config, f) => format!("nats.{f}"),
        }
    }
}

/// The largest password or nkey seed file read: a password file of
/// /dev/zero or a log by mistake is refused, not read until memory runs out.
const MAX_SECRET_BYTES: u64 = 4 << 10;
/// The largest credentials file (a JWT and a seed: 1-2 KiB as `nsc`
/// writes them).
const MAX_CREDS_BYTES: u64 = 64 << 10;
/// The largest CA, certificate or key file (a chain of a few PEM certificates).
const MAX_PEM_BYTES: u64 = 1 << 20;

/// Connection options read and checked before any connection is tried:
/// every file is read once, here, and a wrong one is [`ontime_core::BadInput`]
/// naming the flag or key (an agent would otherwise retry for ever with it).
pub struct Checked {
    servers: Vec<async_nats::ServerAddr>,
    shown: String,
    origin: Origin,
    user_password: Option<(String, String)>,
    nkey_seed: Option<String>,
    creds: Option<String>,
    tls_ca: Option<PathBuf>,
    tls_client: Option<(PathBuf, PathBuf)>,
}

/// Set by the client's event callback when a server refuses the
/// credentials. An agent connects in the background (it spools while the
/// server is away), where a refusal would otherwise look like requests
/// that time out, for ever.
#[derive(Clone, Debug, Default)]
pub struct Refusal(Arc<AtomicBool>);

impl Refusal {
    pub fn refused(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// A server's answer that means "not with these credentials": the
/// server's own error, or a (re)connect attempt that failed with it.
fn is_refusal(e: &async_nats::Event) -> bool {
    match e {
        async_nats::Event::ServerError(async_nats::ServerError::AuthorizationViolation) => true,
        async_nats::Event::ClientError(async_nats::ClientError::Other(what)) => {
            *what == async_nats::ConnectErrorKind::AuthorizationViolation.to_string()
        }
        _ => false,
    }
}

impl NatsArgs {
    /// Reads and checks what the options name (no connection): server
    /// URLs, the password, nkey seed and credentials files, the TLS files.
    pub fn check(&self, origin: Origin) -> Result<Checked> {
        let name = |f: &str| origin.name(f);
        if self.servers.is_empty() {
            return Err(bad_input(format!(
                "{}: no server given: name at least one NATS URL (e.g. nats://127.0.0.1:4222)",
                name("servers")
            )));
        }
        let servers = self
            .servers
            .iter()
            .map(|s| {
                s.trim().parse::<async_nats::ServerAddr>().map_err(|e| {
                    bad_input(format!(
                        "{} {s:?}: not a NATS URL ({e}); e.g. nats://127.0.0.1:4222",
                        name("servers")
                    ))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let user_password = match (&self.user, &self.password_file) {
            (Some(user), Some(f)) => {
                let text = ontime_core::fsio::read_text_capped(f, "password file", MAX_SECRET_BYTES)
                    .with_context(|| name("password_file"))?;
                Some((user.clone(), text.trim_end_matches(['\n', '\r']).to_string()))
            }
            (Some(user), None) => match std::env::var("ONTIME_NATS_PASSWORD") {
                Ok(p) => Some((user.clone(), p)),
                Err(_) => {
                    return Err(bad_input(format!(
                        "{} {user} needs a password: {} FILE or ONTIME_NATS_PASSWORD",
                        name("user"),
                        name("password_file")
                    )))
                }
            },
            (None, Some(_)) => {
                return Err(bad_input(format!(
                    "{} needs {} (the user whose password it holds)",
                    name("password_file"),
                    name("user")
                )))
            }
            (None, None) => None,
        };
        let nkey_seed = match &self.nkey {
            Some(f) => {
                let text = ontime_core::fsio::read_text_capped(f, "nkey seed file", MAX_SECRET_BYTES)
                    .with_context(|| name("nkey"))?;
                let seed = text.trim().to_string();
                // A seed that cannot sign would fail every connect attempt
                // (in the background, for an agent): refused now instead.
                nkeys::KeyPair::from_seed(&seed).map(drop).map_err(|e| {
                    bad_input(format!(
                        "{} {}: not an nkey seed ({e}): give the file holding the user's seed (SU...)",
                        name("nkey"),
                        f.display()
                    ))
                })?;
                Some(seed)
            }
            None => None,
        };
        let creds = match &self.creds {
            Some(f) => {
                let text = ontime_core::fsio::read_text_capped(f, "credentials file", MAX_CREDS_BYTES)
                    .with_context(|| name("creds"))?;
                // Parsed now (the JWT and the seed) so garbage is refused
                // before any connection.
                async_nats::ConnectOptions::new()
                    .credentials(&text)
                    .map(drop)
                    .map_err(|e| {
                        bad_input(format!(
                            "{} {}: not a NATS credentials file ({e}): give the .creds file `nsc` wrote",
                            name("creds"),
                            f.display()
                        ))
                    })?;
                Some(text)
            }
            None => None,
        };
        if let Some(ca) = &self.tls_ca {
            check_pem(ca, &name("tls_ca"), "CA certificate file", "CERTIFICATE-----")?;
        }
        let tls_client = match (&self.tls_cert, &self.tls_key) {
            (Some(c), Some(k)) => {
                check_pem(c, &name("tls_cert"), "certificate file", "CERTIFICATE-----")?;
                check_pem(k, &name("tls_key"), "private key file", "PRIVATE KEY-----")?;
                Some((c.clone(), k.clone()))
            }
            (None, None) => None,
            _ => {
                return Err(bad_input(format!(
                    "{} and {} go together (client authentication needs both)",
                    name("tls_cert"),
                    name("tls_key")
                )))
            }
        };
        Ok(Checked {
            servers,
            shown: self.servers.join(","),
            origin,
            user_password,
            nkey_seed,
            creds,
            tls_ca: self.tls_ca.clone(),
            tls_client,
        })
    }

    /// Connects at once or fails (`analyse`, `fleet`, `plan --from-fleet`).
    pub async fn connect(&self, name: &str) -> Result<async_nats::Client> {
        let c = self.check(Origin::Flags)?;
        let servers = c.servers.clone();
        c.options(name)?.connect(servers).await.map_err(|e| c.connect_error(&e))
    }
}

impl Checked {
    /// The servers, as given.
    pub fn servers(&self) -> &str {
        &self.shown
    }

    fn options(&self, name: &str) -> Result<async_nats::ConnectOptions> {
        let mut o = async_nats::ConnectOptions::new()
            .name(name)
            .connection_timeout(Duration::from_secs(5))
            .max_reconnects(None);
        if let Some((user, password)) = &self.user_password {
            o = o.user_and_password(user.clone(), password.clone());
        }
        if let Some(seed) = &self.nkey_seed {
            o = o.nkey(seed.clone());
        }
        if let Some(text) = &self.creds {
            o = o
                .credentials(text)
                .map_err(|e| bad_input(format!("{}: {e}", self.origin.name("creds"))))?;
        }
        if let Some(ca) = &self.tls_ca {
            o = o.add_root_certificates(ca.clone()).require_tls(true);
        }
        if let Some((c, k)) = &self.tls_client {
            o = o.add_client_certificate(c.clone(), k.clone());
        }
        Ok(o)
    }

    /// Connects in the background and returns at once: the client queues
    /// requests until a server answers (an agent starts, and spools, while
    /// the server is away). The [`Refusal`] says when a server refused the
    /// credentials.
    pub async fn connect_in_background(&self, name: &str) -> Result<(async_nats::Client, Refusal)> {
        let refusal = Refusal::default();
        let seen = refusal.0.clone();
        let o = self
            .options(name)?
            .retry_on_initial_connect()
            .event_callback(move |event| {
                if is_refusal(&event) {
                    seen.store(true, Ordering::Relaxed);
                }
                async {}
            });
        let client = o
            .connect(self.servers.clone())
            .await
            .map_err(|e| self.connect_error(&e))?;
        Ok((client, refusal))
    }

    /// The error for credentials a server refused: bad input (exit 2), the
    /// same words whichever verb met it.
    pub fn refused(&self) -> anyhow::Error {
        bad_input(format!(
            "NATS at {}: the server refused the credentials: check {}, {}, {} or {}",
            self.shown,
            self.origin.name("user"),
            self.origin.name("password_file"),
            self.origin.name("creds"),
            self.origin.name("nkey")
        ))
    }

    fn connect_error(&self, e: &async_nats::ConnectError) -> anyhow::Error {
        let hint = match e.kind() {
            async_nats::ConnectErrorKind::AuthorizationViolation => return self.refused(),
            async_nats::ConnectErrorKind::Tls => format!(
                " (TLS: check {}, {} and {})",
                self.origin.name("tls_ca"),
                self.origin.name("tls_cert"),
                self.origin.name("tls_key")
            ),
            _ => " (is nats-server running there with JetStream on? `nats-server -js`)".into(),
        };
        anyhow::anyhow!("cannot connect to NATS at {}: {e}{hint}", self.shown)
    }
}

/// A PEM file given for TLS: a regular file under the cap holding a
/// `-----BEGIN ...{kind}` block (the TLS library reads it only when a
/// connection is made: in an agent's background, where a missing file
/// would be retried for ever).
fn check_pem(path: &Path, flag: &str, what: &str, kind: &str) -> Result<()> {
    let text = ontime_core::fsio::read_text_capped(path, what, MAX_PEM_BYTES).with_context(|| flag.to_string())?;
    let has_block = text
        .lines()
        .any(|l| l.trim().starts_with("-----BEGIN ") && l.trim().ends_with(kind));
    if !has_block {
        return Err(bad_input(format!(
            "{flag} {}: not a PEM {what} (no -----BEGIN ...{kind} line)",
            path.display()
        )));
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A public test user of the NATS client's own suite (its JWT and seed).
    const TEST_CREDS: &str = "-----BEGIN NATS USER JWT-----
eyJ0eXAiOiJKV1QiLCJhbGciOiJlZDI1NTE5LW5rZXkifQ.eyJqdGkiOiJMN1dBT1hJU0tPSUZNM1QyNEhMQ09ENzJRT1czQkNVWEdETjRKVU1SSUtHTlQ3RzdZVFRRIiwiaWF0IjoxNjUxNzkwOTgyLCJpc3MiOiJBRFRRUzdaQ0ZWSk5XNTcyNkdPWVhXNVRTQ1pGTklRU0hLMlpHWVVCQ0Q1RDc3T1ROTE9PS1pPWiIsIm5hbWUiOiJUZXN0VXNlciIsInN1YiI6IlVBRkhHNkZVRDJVVTRTREZWQUZVTDVMREZPMlhNNFdZTTc2VU5YVFBKWUpLN0VFTVlSQkhUMlZFIiwibmF0cyI6eyJwdWIiOnt9LCJzdWIiOnt9LCJzdWJzIjotMSwiZGF0YSI6LTEsInBheWxvYWQiOi0xLCJ0eXBlIjoidXNlciIsInZlcnNpb24iOjJ9fQ.bp2-Jsy33l4ayF7Ku1MNdJby4WiMKUrG-rSVYGBusAtV3xP4EdCa-zhSNUaBVIL3uYPPCQYCEoM1pCUdOnoJBg
------END NATS USER JWT------

-----BEGIN USER NKEY SEED-----
SUACH75SWCM5D2JMJM6EKLR2WDARVGZT4QC6LX3AGHSWOMVAKERABBBRWM
------END USER NKEY SEED------
";

    /// The refusal: bad input, one line; its text.
    fn refused(a: &NatsArgs, origin: Origin) -> String {
        let e = match a.check(origin) {
            Ok(_) => panic!("{a:?} was accepted"),
            Err(e) => e,
        };
        let text = format!("{e:#}");
        assert!(
            e.downcast_ref::<ontime_core::BadInput>().is_some(),
            "not bad input: {text}"
        );
        assert_eq!(text.lines().count(), 1, "{text}");
        text
    }

    fn servers(s: &[&str]) -> NatsArgs {
        NatsArgs {
            servers: s.iter().map(|s| s.to_string()).collect(),
            ..NatsArgs::default()
        }
    }

    #[test]
    fn server_urls_are_checked_before_connecting() {
        assert!(NatsArgs::default().check(Origin::Flags).is_ok());
        assert!(servers(&["nats://a:4222", "b"]).check(Origin::Flags).is_ok());
        let e = refused(&servers(&[]), Origin::Config);
        assert!(e.starts_with("nats.servers: no server given"), "{e}");
        let e = refused(&servers(&["http://x:4222"]), Origin::Flags);
        assert!(e.starts_with("--nats \"http://x:4222\": not a NATS URL"), "{e}");
        let e = refused(&servers(&["nats://127.0.0.1:99999"]), Origin::Flags);
        assert!(e.contains("not a NATS URL"), "{e}");
    }

    #[test]
    fn secret_files_are_read_capped_and_checked() {
        let d = tempfile::tempdir().unwrap();
        let file = |name: &str, text: &str| {
            let p = d.path().join(name);
            std::fs::write(&p, text).unwrap();
            p
        };
        let with_password = |f: PathBuf| NatsArgs {
            user: Some("ontime".into()),
            password_file: Some(f),
            ..NatsArgs::default()
        };
        // /dev/zero is refused at once, not read until memory runs out.
        let e = refused(&with_password("/dev/zero".into()), Origin::Flags);
        assert!(
            e.starts_with("--password-file: ") && e.contains("not a regular file"),
            "{e}"
        );
        let e = refused(&with_password(file("big", &"x".repeat(5000))), Origin::Flags);
        assert!(e.contains("(4096 bytes)"), "{e}");
        let e = refused(&with_password(d.path().join("missing")), Origin::Config);
        assert!(e.starts_with("nats.password_file: ") && e.contains("missing"), "{e}");
        let ok = with_password(file("pw", "secret\n")).check(Origin::Flags).unwrap();
        assert_eq!(ok.user_password, Some(("ontime".into(), "secret".into())));
        let e = refused(
            &NatsArgs {
                password_file: Some(file("pw2", "secret\n")),
                ..NatsArgs::default()
            },
            Origin::Flags,
        );
        assert!(e.contains("needs --user"), "{e}");

        let with_nkey = |f: PathBuf| NatsArgs {
            nkey: Some(f),
            ..NatsArgs::default()
        };
        let e = refused(&with_nkey(file("seed", "SUAGARBAGE\n")), Origin::Flags);
        assert!(e.starts_with("--nkey ") && e.contains("not an nkey seed"), "{e}");
        let e = refused(&with_nkey(d.path().join("no-seed")), Origin::Flags);
        assert!(e.starts_with("--nkey: "), "{e}");
        let seed = file(
            "good-seed",
            "SUACH75SWCM5D2JMJM6EKLR2WDARVGZT4QC6LX3AGHSWOMVAKERABBBRWM\n",
        );
        assert!(with_nkey(seed).check(Origin::Flags).is_ok());

        let with_creds = |f: PathBuf| NatsArgs {
            creds: Some(f),
            ..NatsArgs::default()
        };
        let e = refused(
            &with_creds(file("garbage.creds", "not a credentials file\n")),
            Origin::Flags,
        );
        assert!(
            e.starts_with("--creds ") && e.contains("not a NATS credentials file"),
            "{e}"
        );
        let e = refused(&with_creds(d.path().join("missing.creds")), Origin::Config);
        assert!(e.starts_with("nats.creds: "), "{e}");
        assert!(with_creds(file("user.creds", TEST_CREDS)).check(Origin::Flags).is_ok());
    }

    #[test]
    fn tls_files_must_exist_and_be_pem() {
        let d = tempfile::tempdir().unwrap();
        let ca = d.path().join("ca.pem");
        let tls = |ca: &Path| NatsArgs {
            tls_ca: Some(ca.to_path_buf()),
            ..NatsArgs::default()
        };
        let e = refused(&tls(&ca), Origin::Config);
        assert!(e.starts_with("nats.tls_ca: "), "{e}");
        std::fs::write(&ca, "hello\n").unwrap();
        let e = refused(&tls(&ca), Origin::Flags);
        assert!(e.contains("not a PEM CA certificate file"), "{e}");
        std::fs::write(&ca, "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n").unwrap();
        assert!(tls(&ca).check(Origin::Flags).is_ok());
        let half = NatsArgs {
            tls_cert: Some(ca.clone()),
            ..NatsArgs::default()
        };
        let e = refused(&half, Origin::Config);
        assert!(e.contains("nats.tls_cert and nats.tls_key go together"), "{e}");
    }

    #[test]
    fn a_refusal_is_recognised_in_the_clients_events() {
        let refusal = async_nats::ConnectErrorKind::AuthorizationViolation.to_string();
        assert!(is_refusal(&async_nats::Event::ClientError(
            async_nats::ClientError::Other(refusal)
        )));
        assert!(is_refusal(&async_nats::Event::ServerError(
            async_nats::ServerError::AuthorizationViolation
        )));
        assert!(!is_refusal(&async_nats::Event::ClientError(
            async_nats::ClientError::Other(async_nats::ConnectErrorKind::Io.to_string())
        )));
        assert!(!is_refusal(&async_nats::Event::Disconnected));
        let c = servers(&["nats://a:4222"]).check(Origin::Config).unwrap();
        let e = c.refused();
        assert!(e.downcast_ref::<ontime_core::BadInput>().is_some());
        assert!(e.to_string().contains("the server refused the credentials"), "{e}");
    }
}
