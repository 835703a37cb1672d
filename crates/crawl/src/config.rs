//! Crawl configuration: gateways, points, period, points per request and
//! phase layout, read from TOML and checked before anything starts.
//!
//! ```toml
//! period = "1s"              # default period of every point
//! points_per_request = 10    # N
//! phase = "spread"           # or "aligned", or "clock"
//! timeout = "1s"             # default: the period
//! max_connections = 256      # per gateway and vCPU thread
//!
//! [[gateway]]
//! url = "http://127.0.0.1:8080/b0"   # or modbus://HOST[:PORT]/UNIT[/input],
//!                                    # or bacnet://HOST[:PORT]/DEVICE[/TYPE]
//! points = 1000              # ids 0..1000, or point_ids = [3, 7, 9]
//! period = "500ms"           # optional, overrides the default
//! ```
//!
//! A URL's scheme chooses the protocol ([`Protocol`]). Over Modbus/TCP a
//! point id is a register address, and a request reads a run of
//! consecutive registers: up to N, at most 125, split where the ids are
//! not consecutive. Over BACnet/IP a point id is an object's instance, and
//! a request reads up to N present values, as many as fit the device's
//! largest answer (asked of the device with Who-Is, or `max_apdu`). The
//! poll rate follows: requests per gateway / period.

use anyhow::{anyhow, bail, Context, Result};
use ontime_core::duration::opt_text_ns;
use serde::{Deserialize, Serialize};
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::Path;

pub use ontime_core::work::Phase;

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatewaySpec {
    /// `http://HOST:PORT/BUILDING`.
    pub url: String,
    /// Poll point ids 0..points.
    #[serde(default)]
    pub points: Option<u32>,
    /// Or poll exactly these point ids.
    #[serde(default)]
    pub point_ids: Option<Vec<u32>>,
    #[serde(default, with = "opt_text_ns", skip_serializing_if = "Option::is_none")]
    pub period: Option<u64>,
    /// BACnet: the device's largest APDU in bytes (50..1476), instead of
    /// asking the device (Who-Is) before the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_apdu: Option<u16>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CrawlFile {
    #[serde(default, with = "opt_text_ns", skip_serializing_if = "Option::is_none")]
    pub period: Option<u64>,
    #[serde(default)]
    pub points_per_request: Option<usize>,
    #[serde(default)]
    pub phase: Option<Phase>,
    #[serde(default, with = "opt_text_ns", skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
    #[serde(default)]
    pub max_connections: Option<usize>,
    #[serde(rename = "gateway", default)]
    pub gateways: Vec<GatewaySpec>,
}

impl CrawlFile {
    pub fn from_file(path: &Path) -> Result<CrawlFile> {
        ontime_core::config::read_toml(path, "crawl config")
    }

    /// `rate` polls per second over `urls`, `n` points per request at
    /// `period`: each gateway gets the points that make its share.
    pub fn for_rate(urls: Vec<String>, rate: f64, n: usize, period_ns: u64) -> Result<CrawlFile, String> {
        ontime_core::limits::rate("rate", rate, ontime_core::limits::MAX_POLLS_PER_SECOND)?;
        let per_gw = rate / urls.len().max(1) as f64 * n as f64 * period_ns as f64 / 1e9;
        Ok(CrawlFile::of_points(urls, per_gw.round().max(1.0) as u32, n, period_ns))
    }

    /// `points` on each of `urls`, `n` per request, every `period_ns`.
    pub fn of_points(urls: Vec<String>, points: u32, n: usize, period_ns: u64) -> CrawlFile {
        CrawlFile {
            period: Some(period_ns),
            points_per_request: Some(n),
            phase: None,
            timeout: None,
            max_connections: None,
            gateways: urls
                .into_iter()
                .map(|url| GatewaySpec {
                    url,
                    points: Some(points),
                    point_ids: None,
                    period: None,
                    max_apdu: None,
                })
                .collect(),
        }
    }
}

/// What a gateway speaks, from its URL's scheme.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Protocol {
    /// `http://HOST[:PORT]/BUILDING`: getValues over HTTP/1.1 keep-alive
    /// (`docs/wire.md`).
    #[default]
    Http,
    /// `modbus://HOST[:PORT]/UNIT[/holding|/input]`: Modbus/TCP reads of
    /// holding (function 3, the default) or input registers (function 4)
    /// from unit UNIT; a point id is a register address.
    Modbus { unit: u8, table: RegisterTable },
    /// `bacnet://HOST[:PORT]/DEVICE[/TYPE]`: BACnet/IP ReadPropertyMultiple
    /// of the present value of objects of TYPE (analog-input by default);
    /// a point id is an object's instance. `max_apdu`: the largest answer
    /// the device takes, which sizes each request; `max_apdu_from`: where
    /// it was learnt (None until the config is resolved).
    Bacnet {
        device: u32,
        object_type: BacnetObjectType,
        max_apdu: u16,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_apdu_from: Option<ApduFrom>,
    },
}

/// Where a BACnet device's largest APDU was learnt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ApduFrom {
    /// The device's I-Am, asked before the run.
    IAm,
    /// The crawl config's `max_apdu`.
    Config,
}

/// The object types a BACnet crawl reads the present value of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BacnetObjectType {
    AnalogInput,
    AnalogOutput,
    AnalogValue,
    BinaryInput,
    BinaryValue,
}

impl BacnetObjectType {
    const ALL: [(BacnetObjectType, &'static str, u16); 5] = [
        (BacnetObjectType::AnalogInput, "analog-input", 0),
        (BacnetObjectType::AnalogOutput, "analog-output", 1),
        (BacnetObjectType::AnalogValue, "analog-value", 2),
        (BacnetObjectType::BinaryInput, "binary-input", 3),
        (BacnetObjectType::BinaryValue, "binary-value", 5),
    ];

    pub fn code(self) -> u16 {
        BacnetObjectType::ALL.iter().find(|t| t.0 == self).map_or(0, |t| t.2)
    }

    fn parse(name: &str) -> Option<BacnetObjectType> {
        BacnetObjectType::ALL.iter().find(|t| t.1 == name).map(|t| t.0)
    }
}

impl Protocol {
    /// The most points one request of this protocol carries.
    pub fn max_points_per_request(&self) -> usize {
        match self {
            Protocol::Http => ontime_core::wire::MAX_POINTS_PER_REQUEST,
            Protocol::Modbus { .. } => ontime_fieldbus::modbus::MAX_REGISTERS as usize,
            Protocol::Bacnet { max_apdu, .. } => ontime_fieldbus::bacnet::objects_per_request(*max_apdu),
        }
    }

    /// The largest point id it can name.
    fn max_point_id(&self) -> u32 {
        match self {
            Protocol::Http => u32::MAX,
            Protocol::Modbus { .. } => u16::MAX as u32,
            Protocol::Bacnet { .. } => (1 << 22) - 1,
        }
    }

    /// Whether it runs over UDP (BACnet/IP) rather than a TCP connection.
    pub fn is_udp(&self) -> bool {
        matches!(self, Protocol::Bacnet { .. })
    }
}

/// Modbus's register tables a crawl reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RegisterTable {
    Holding,
    Input,
}

impl From<RegisterTable> for ontime_fieldbus::modbus::Table {
    fn from(t: RegisterTable) -> Self {
        match t {
            RegisterTable::Holding => ontime_fieldbus::modbus::Table::Holding,
            RegisterTable::Input => ontime_fieldbus::modbus::Table::Input,
        }
    }
}

/// A resolved gateway.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Gateway {
    pub url: String,
    /// Resolved from `url`; not part of the result (read back as 0.0.0.0:0).
    #[serde(skip_serializing, default = "unresolved")]
    pub addr: SocketAddr,
    /// What it speaks (absent in results made before there was a choice:
    /// HTTP).
    #[serde(default)]
    pub protocol: Protocol,
    /// HOST:PORT as the URL gave it (HTTP's Host header).
    pub host_header: String,
    /// Building name (the path prefix); over Modbus, the unit's number.
    pub building: String,
    /// Written as a range list, e.g. "0-999" or "1,5,7-9".
    #[serde(serialize_with = "serialize_ranges", deserialize_with = "deserialize_ranges")]
    pub point_ids: Vec<u32>,
    pub period_ns: u64,
}

fn serialize_ranges<S: serde::Serializer>(ids: &[u32], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&ranges(ids))
}

fn unresolved() -> SocketAddr {
    SocketAddr::from(([0, 0, 0, 0], 0))
}

fn deserialize_ranges<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<u32>, D::Error> {
    let text = String::deserialize(d)?;
    parse_ranges(&text).map_err(serde::de::Error::custom)
}

/// Reads a range list written by [`ranges`] back ("0-999", "1,5,7-9").
pub fn parse_ranges(text: &str) -> Result<Vec<u32>, String> {
    let mut ids = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let bad = || format!("'{part}' is not an id or a range a-b");
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
                if b < a || (b - a) as u64 >= ontime_core::limits::MAX_POINTS {
                    return Err(bad());
                }
                ids.extend(a..=b);
            }
            None => ids.push(part.parse().map_err(|_| bad())?),
        }
        if ids.len() as u64 > ontime_core::limits::MAX_POINTS {
            return Err(format!("more than {} points", ontime_core::limits::MAX_POINTS));
        }
    }
    Ok(ids)
}

/// A compact range list of ids in their given order: "0-999", "1,5,7-9".
pub fn ranges(ids: &[u32]) -> String {
    let mut out = Vec::new();
    let mut i = 0;
    while i < ids.len() {
        let mut j = i;
        while j + 1 < ids.len() && ids[j + 1] == ids[j].wrapping_add(1) {
            j += 1;
        }
        out.push(if i == j {
            ids[i].to_string()
        } else {
            format!("{}-{}", ids[i], ids[j])
        });
        i = j + 1;
    }
    out.join(",")
}

/// The resolved crawl plan, ready to run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CrawlConfig {
    pub gateways: Vec<Gateway>,
    pub points_per_request: usize,
    pub phase: Phase,
    pub timeout_ns: u64,
    pub max_connections: usize,
}

pub const DEFAULT_PERIOD_NS: u64 = 1_000_000_000;
pub const DEFAULT_N: usize = 10;
pub const DEFAULT_MAX_CONNECTIONS: usize = 256;

impl CrawlConfig {
    /// Resolves and checks a config; errors name the key at fault.
    pub fn resolve(file: CrawlFile) -> Result<CrawlConfig> {
        let n = file.points_per_request.unwrap_or(DEFAULT_N);
        if n == 0 || n > ontime_core::wire::MAX_POINTS_PER_REQUEST {
            bail!(
                "points_per_request = {n}: must be 1..{}",
                ontime_core::wire::MAX_POINTS_PER_REQUEST
            );
        }
        let default_period = file.period.unwrap_or(DEFAULT_PERIOD_NS);
        if default_period < 1_000_000 {
            bail!("period must be at least 1ms");
        }
        if file.gateways.is_empty() {
            bail!("no gateway: add a [[gateway]] with url and points, or pass --url");
        }
        let max_connections = file.max_connections.unwrap_or(DEFAULT_MAX_CONNECTIONS);
        if max_connections == 0 {
            bail!("max_connections must be at least 1");
        }
        let mut gateways = Vec::new();
        for (i, g) in file.gateways.into_iter().enumerate() {
            let ctx = || format!("url {} (gateway #{})", shown(&g.url), i + 1);
            let mut target = parse_url(&g.url).with_context(ctx)?;
            if let Protocol::Bacnet {
                device,
                max_apdu,
                max_apdu_from,
                ..
            } = &mut target.protocol
            {
                match g.max_apdu {
                    Some(m) if !(50..=1476).contains(&m) => bail!("{}: max_apdu = {m}: must be 50..1476", ctx()),
                    Some(m) => (*max_apdu, *max_apdu_from) = (m, Some(ApduFrom::Config)),
                    None => {
                        let i_am = ask_who_is(target.addr, *device).with_context(ctx)?;
                        (*max_apdu, *max_apdu_from) = (i_am.max_apdu.clamp(50, 1476) as u16, Some(ApduFrom::IAm));
                    }
                }
            } else if g.max_apdu.is_some() {
                bail!("{}: max_apdu is for bacnet:// gateways", ctx());
            }
            let protocol = target.protocol;
            if matches!(protocol, Protocol::Modbus { .. }) && n > protocol.max_points_per_request() {
                bail!(
                    "{}: points_per_request = {n}, but one Modbus read carries at most {} registers",
                    ctx(),
                    protocol.max_points_per_request()
                );
            }
            let point_ids = match (g.points, g.point_ids) {
                (Some(_), Some(_)) => bail!("{}: give either points or point_ids, not both", ctx()),
                (Some(0), None) => bail!("{}: points must be at least 1", ctx()),
                (Some(p), None) if p as u64 > ontime_core::limits::MAX_POINTS => bail!(
                    "{}: points = {p} is more than one gateway can carry ({})",
                    ctx(),
                    ontime_core::limits::MAX_POINTS
                ),
                (Some(p), None) => (0..p).collect(),
                (None, Some(ids)) if ids.is_empty() => bail!("{}: point_ids is empty", ctx()),
                (None, Some(ids)) => ids,
                (None, None) => bail!("{}: needs points = COUNT or point_ids = [...]", ctx()),
            };
            if let Some(&id) = point_ids.iter().find(|&&id| id > protocol.max_point_id()) {
                bail!(
                    "{}: point {id} is not a register address (0..{})",
                    ctx(),
                    protocol.max_point_id()
                );
            }
            let period_ns = g.period.unwrap_or(default_period);
            if period_ns < 1_000_000 {
                bail!("{}: period must be at least 1ms", ctx());
            }
            gateways.push(Gateway {
                url: g.url,
                addr: target.addr,
                protocol,
                host_header: target.host,
                building: target.building,
                point_ids,
                period_ns,
            });
        }
        let timeout_ns = file
            .timeout
            .unwrap_or_else(|| gateways.iter().map(|g| g.period_ns).min().unwrap_or(default_period));
        if timeout_ns == 0 {
            bail!("timeout must be above 0");
        }
        let cfg = CrawlConfig {
            gateways,
            points_per_request: n,
            phase: file.phase.unwrap_or_default(),
            timeout_ns,
            max_connections,
        };
        let rate = cfg.polls_per_second();
        if rate > ontime_core::limits::MAX_POLLS_PER_SECOND {
            bail!(
                "{rate:.0} polls/s planned: one crawler plans at most {} (fewer points, a larger N or a longer period)",
                ontime_core::limits::MAX_POLLS_PER_SECOND
            );
        }
        Ok(cfg)
    }

    /// Planned polls per second over all gateways.
    pub fn polls_per_second(&self) -> f64 {
        self.gateways
            .iter()
            .map(|g| g.requests(self.points_per_request).count() as f64 * 1e9 / g.period_ns as f64)
            .sum()
    }
}

impl Gateway {
    /// Its points as the requests that read them, `n` at most in each:
    /// over HTTP any `n`; over Modbus runs of consecutive registers.
    pub fn requests(&self, n: usize) -> impl Iterator<Item = &[u32]> {
        let consecutive = matches!(self.protocol, Protocol::Modbus { .. });
        // BACnet: as many as fit one unsegmented answer.
        let n = n.min(self.protocol.max_points_per_request());
        let mut rest = self.point_ids.as_slice();
        std::iter::from_fn(move || {
            if rest.is_empty() {
                return None;
            }
            let mut len = rest.len().min(n.max(1));
            if consecutive {
                len = (1..len)
                    .find(|&i| rest[i] != rest[i - 1].wrapping_add(1))
                    .unwrap_or(len);
            }
            let (head, tail) = rest.split_at(len);
            rest = tail;
            Some(head)
        })
    }
}

/// A URL as errors show it: quoted with control characters escaped, and
/// cut, so the error stays one short line whatever the URL holds.
fn shown(url: &str) -> String {
    const MAX: usize = 100;
    let head: String = url.chars().take(MAX).collect();
    let more = if head.len() < url.len() { "..." } else { "" };
    format!("{head:?}{more}")
}

/// A gateway's URL taken apart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub addr: SocketAddr,
    pub protocol: Protocol,
    /// HOST:PORT as written.
    pub host: String,
    /// The building (HTTP) or the unit's number (Modbus).
    pub building: String,
}

/// Splits `http://host:port/building` into a socket address, Host header and
/// building name, or `modbus://host[:port]/unit[/holding|/input]` into an
/// address, a unit and a register table.
///
/// The host and the building are written into the head of every request
/// ([`crate::http::RequestTemplate`]), so this is where a URL is refused
/// unless it is visible ASCII: a CR or LF would end the request line or a
/// header early and inject headers of the URL's choosing, a space would
/// split the request line. The building is one path segment, without `?`
/// or `#`.
pub fn parse_url(url: &str) -> Result<Target> {
    if let Some((at, c)) = url.char_indices().find(|(_, c)| !c.is_ascii_graphic()) {
        bail!("{c:?} at byte {at}: a URL holds no space, control or non-ASCII character (percent-encode it)");
    }
    if let Some(rest) = url.strip_prefix("modbus://") {
        return parse_modbus(rest);
    }
    if let Some(rest) = url.strip_prefix("bacnet://") {
        return parse_bacnet(rest);
    }
    let rest = url.strip_prefix("http://").ok_or_else(|| {
        anyhow!("url must start with http://, modbus:// or bacnet:// (https and other schemes are not supported)")
    })?;
    let (hostport, path) = rest
        .split_once('/')
        .ok_or_else(|| anyhow!("url needs a building path, e.g. http://127.0.0.1:8080/b0"))?;
    if hostport.is_empty() {
        bail!("url needs a host, e.g. http://127.0.0.1:8080/b0");
    }
    let building = path.trim_matches('/');
    if building.is_empty() || building.contains(['/', '?', '#']) {
        bail!("url path must be one building name, e.g. /b0");
    }
    Ok(Target {
        addr: resolve(hostport, 80)?,
        protocol: Protocol::Http,
        host: hostport.to_string(),
        building: building.to_string(),
    })
}

fn resolve(hostport: &str, default_port: u16) -> Result<SocketAddr> {
    let with_port = if hostport.contains(':') {
        hostport.to_string()
    } else {
        format!("{hostport}:{default_port}")
    };
    with_port
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve '{hostport}'"))?
        .next()
        .ok_or_else(|| anyhow!("'{hostport}' resolves to no address"))
}

/// `host[:port]/unit[/holding|/input]` of a `modbus://` URL.
fn parse_modbus(rest: &str) -> Result<Target> {
    const EXAMPLE: &str = "e.g. modbus://127.0.0.1:502/1 or modbus://127.0.0.1:502/1/input";
    let (hostport, mut parts) = host_and_path(rest, "a unit id", EXAMPLE)?;
    let unit = parts.next().unwrap_or("");
    let unit: u8 = unit
        .parse()
        .map_err(|_| anyhow!("'{unit}' is not a Modbus unit id (0..255), {EXAMPLE}"))?;
    let table = match parts.next() {
        None | Some("holding") => RegisterTable::Holding,
        Some("input") => RegisterTable::Input,
        Some(other) => bail!("'{other}' is not a register table: holding or input, {EXAMPLE}"),
    };
    if parts.next().is_some() {
        bail!("url has more path than unit and table, {EXAMPLE}");
    }
    Ok(Target {
        addr: resolve(hostport, ontime_fieldbus::modbus::DEFAULT_PORT)?,
        protocol: Protocol::Modbus { unit, table },
        host: hostport.to_string(),
        building: unit.to_string(),
    })
}

/// A field-bus URL's `host[:port]` and the parts of its path (which
/// must name `what`).
fn host_and_path<'a>(rest: &'a str, what: &str, example: &str) -> Result<(&'a str, std::str::Split<'a, char>)> {
    let (hostport, path) = rest
        .split_once('/')
        .ok_or_else(|| anyhow!("url needs {what}, {example}"))?;
    if hostport.is_empty() {
        bail!("url needs a host, {example}");
    }
    Ok((hostport, path.trim_end_matches('/').split('/')))
}

/// `host[:port]/device[/type]` of a `bacnet://` URL; the device's APDU
/// size is asked later (or configured).
fn parse_bacnet(rest: &str) -> Result<Target> {
    const EXAMPLE: &str = "e.g. bacnet://127.0.0.1:47808/1001 or bacnet://127.0.0.1/1001/analog-value";
    let (hostport, mut parts) = host_and_path(rest, "a device instance", EXAMPLE)?;
    let device = parts.next().unwrap_or("");
    let device: u32 = device
        .parse()
        .ok()
        .filter(|&d: &u32| d < (1 << 22) - 1)
        .ok_or_else(|| anyhow!("'{device}' is not a BACnet device instance (0..4194302), {EXAMPLE}"))?;
    let object_type = match parts.next() {
        None => BacnetObjectType::AnalogInput,
        Some(name) => BacnetObjectType::parse(name).ok_or_else(|| {
            anyhow!("'{name}' is not an object type read here: analog-input, analog-output, analog-value, binary-input or binary-value")
        })?,
    };
    if parts.next().is_some() {
        bail!("url has more path than device and object type, {EXAMPLE}");
    }
    Ok(Target {
        addr: resolve(hostport, ontime_fieldbus::bacnet::DEFAULT_PORT)?,
        protocol: Protocol::Bacnet {
            device,
            object_type,
            max_apdu: 0,
            max_apdu_from: None,
        },
        host: hostport.to_string(),
        building: device.to_string(),
    })
}

/// Asks `device` at `addr` for its I-Am (a unicast Who-Is of its
/// instance, three tries 500 ms apart), before the run: its largest APDU
/// sizes the requests.
fn ask_who_is(addr: SocketAddr, device: u32) -> Result<ontime_fieldbus::bacnet::IAm> {
    use ontime_fieldbus::bacnet;
    let bind: SocketAddr = if addr.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        ([0u16; 8], 0).into()
    };
    let sock = std::net::UdpSocket::bind(bind).context("a UDP socket for Who-Is")?;
    sock.set_read_timeout(Some(std::time::Duration::from_millis(500)))?;
    let mut who = [0u8; 18];
    let n = bacnet::encode_who_is(device, &mut who);
    let mut buf = [0u8; 1500];
    for _ in 0..3 {
        sock.send_to(&who[..n], addr)
            .with_context(|| format!("sending Who-Is to {addr}"))?;
        let end = std::time::Instant::now() + std::time::Duration::from_millis(500);
        while std::time::Instant::now() < end {
            let Ok((len, from)) = sock.recv_from(&mut buf) else {
                break;
            };
            if from.ip() != addr.ip() {
                continue;
            }
            if let Some(i_am) = bacnet::apdu_of(&buf[..len]).ok().and_then(bacnet::parse_i_am) {
                if i_am.device == device {
                    return Ok(i_am);
                }
            }
        }
    }
    bail!(
        "device {device} at {addr} did not answer Who-Is (1.5 s): is it running there? \
         To poll a device that does not answer Who-Is, give its max_apdu in a crawl config's [[gateway]]"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(toml_text: &str) -> Result<CrawlConfig> {
        CrawlConfig::resolve(toml::from_str(toml_text)?)
    }

    #[test]
    fn rate_follows_points_n_and_period() {
        let c = file("points_per_request = 10\n[[gateway]]\nurl='http://127.0.0.1:8080/b0'\npoints=1000").unwrap();
        assert!((c.polls_per_second() - 100.0).abs() < 1e-9);
        assert_eq!(c.timeout_ns, DEFAULT_PERIOD_NS);
    }

    #[test]
    fn point_ids_print_as_ranges() {
        assert_eq!(ranges(&[0, 1, 2, 5, 7, 8]), "0-2,5,7-8");
        assert_eq!(ranges(&[]), "");
    }

    /// A URL with `\r\nX-Injected: 1` was sent as an injected header.
    #[test]
    fn urls_that_would_inject_into_the_request_are_refused() {
        for bad in [
            "http://127.0.0.1:1/b0\r\nX-Injected: 1",
            "http://127.0.0.1:1/b0\nX-Injected:1",
            "http://127.0.0.1:1/b 0",
            "http://127.0.0.1:1\r\nX: 1/b0",
            "http://127.0.0.1:1/b0\u{0}",
            "http://127.0.0.1:1/b\u{e9}",
        ] {
            let e = parse_url(bad).unwrap_err().to_string();
            assert!(e.contains("no space, control or non-ASCII character"), "{bad:?}: {e}");
        }
        for bad in ["http://127.0.0.1:1/b0?x=1", "http://127.0.0.1:1/b#0", "http:///b0"] {
            assert!(parse_url(bad).is_err(), "{bad}");
        }
        // A TOML basic string: the escapes become a real CR and LF.
        let e = file("[[gateway]]\nurl=\"http://127.0.0.1:1/b0\\r\\nX-Injected: 1\"\npoints=1").unwrap_err();
        let e = format!("{e:#}");
        assert!(
            e.contains("gateway #1") && e.contains("\\r\\n") && !e.contains('\n') && !e.contains('\r'),
            "{e}"
        );
        let t = parse_url("http://127.0.0.1:1/b-0_x.y").unwrap();
        assert_eq!((t.host.as_str(), t.building.as_str()), ("127.0.0.1:1", "b-0_x.y"));
    }

    #[test]
    fn modbus_urls_name_a_unit_and_a_table() {
        let t = parse_url("modbus://127.0.0.1/7").unwrap();
        assert_eq!(t.addr.port(), 502);
        assert_eq!(
            t.protocol,
            Protocol::Modbus {
                unit: 7,
                table: RegisterTable::Holding
            }
        );
        let t = parse_url("modbus://127.0.0.1:5020/1/input").unwrap();
        assert_eq!(t.addr.port(), 5020);
        assert!(matches!(
            t.protocol,
            Protocol::Modbus {
                unit: 1,
                table: RegisterTable::Input
            }
        ));
        for bad in [
            "modbus://127.0.0.1",
            "modbus://127.0.0.1/256",
            "modbus://127.0.0.1/1/coils",
            "modbus:///1",
        ] {
            assert!(parse_url(bad).is_err(), "{bad}");
        }
    }

    /// A Modbus read is a run of consecutive registers, at most N and 125.
    #[test]
    fn modbus_requests_are_runs_of_consecutive_registers() {
        let c =
            file("points_per_request = 4\n[[gateway]]\nurl='modbus://127.0.0.1:1/1'\npoint_ids=[0,1,2,3,4,5,9,10,40]")
                .unwrap();
        let runs: Vec<&[u32]> = c.gateways[0].requests(4).collect();
        assert_eq!(runs, vec![&[0, 1, 2, 3][..], &[4, 5], &[9, 10], &[40]]);
        assert!((c.polls_per_second() - 4.0).abs() < 1e-9);
        let e = file("points_per_request = 126\n[[gateway]]\nurl='modbus://127.0.0.1:1/1'\npoints=200").unwrap_err();
        assert!(format!("{e:#}").contains("125 registers"), "{e:#}");
        let e = file("[[gateway]]\nurl='modbus://127.0.0.1:1/1'\npoint_ids=[65536]").unwrap_err();
        assert!(format!("{e:#}").contains("register address"), "{e:#}");
        // HTTP requests take any N points.
        let c =
            file("points_per_request = 4\n[[gateway]]\nurl='http://127.0.0.1:1/b'\npoint_ids=[0,1,5,9,10]").unwrap();
        assert_eq!(c.gateways[0].requests(4).count(), 2);
    }

    #[test]
    fn errors_name_the_problem() {
        let e = file("[[gateway]]\nurl='https://x/b0'\npoints=1").unwrap_err();
        assert!(format!("{e:#}").contains("http://"), "{e:#}");
        let e = file("points_per_request = 0\n[[gateway]]\nurl='http://127.0.0.1:1/b'\npoints=1").unwrap_err();
        assert!(e.to_string().contains("points_per_request"));
        assert!(toml::from_str::<CrawlFile>("perod = '1s'").is_err());
        let e = file("[[gateway]]\nurl='http://127.0.0.1:1/b'").unwrap_err();
        assert!(format!("{e:#}").contains("points"));
    }
}
