//! Gateway configuration: buildings, their points and listen addresses, the
//! local-controller delay and the faults to inject. Read from TOML
//! (`--config`) or built from command-line flags.

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// One building's gateway.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Building {
    /// Path prefix without slashes: requests go to `/<name>/getValues`.
    pub name: String,
    /// Number of points, ids 0..points.
    pub points: u32,
    /// Percentage of points that are analog (the rest are binary).
    #[serde(default = "default_analog_percent")]
    pub analog_percent: u8,
    /// Own listen address; None shares the gateway's `listen`.
    #[serde(default)]
    pub listen: Option<SocketAddr>,
    /// Its Modbus unit id (`protocol = "modbus"`); by default its place
    /// among the buildings on its address, from 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<u8>,
    /// Its BACnet device instance (`protocol = "bacnet"`); by default its
    /// place in the config, from 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<u32>,
}

/// What the gateway speaks on its addresses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// getValues over HTTP/1.1 (`docs/wire.md`).
    #[default]
    Http,
    /// Modbus/TCP: each building is a unit whose holding and input
    /// registers 0..points are its points, a value in hundredths
    /// (21.37 reads 2137; a binary point on reads 100).
    Modbus,
    /// BACnet/IP: each building a device on an address of its own, its
    /// analog-input objects 0..points its points (present values as REALs).
    Bacnet,
}

fn default_analog_percent() -> u8 {
    70
}

/// Longest building name.
pub const MAX_NAME_LEN: usize = 64;

/// A building's name is an identifier: it is the path segment of its URL
/// and a field of the receive log, whose fields are separated by spaces
/// and whose records by newlines. So it is 1..[`MAX_NAME_LEN`] ASCII
/// letters, digits, '-', '_' or '.', not starting with '.': a name with a
/// space, a newline or a slash is refused, never escaped.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        return Ok(());
    }
    // Debug-quoted and cut, so the error stays one short line whatever
    // the name holds.
    let shown: String = name.chars().take(MAX_NAME_LEN).collect();
    let more = if shown.len() < name.len() { "..." } else { "" };
    Err(format!(
        "building name {shown:?}{more} is not a name: give 1..{MAX_NAME_LEN} letters, digits, '-', '_' or '.' (not first), with no space, slash or control character"
    ))
}

/// Local-controller delay and fault injection, applied per request.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Faults {
    /// Fixed controller delay before answering.
    #[serde(rename = "delay", with = "ontime_core::duration::text_ns")]
    pub delay_ns: u64,
    /// Uniformly random extra delay, 0..this.
    #[serde(rename = "delay_random", with = "ontime_core::duration::text_ns")]
    pub delay_random_ns: u64,
    /// Probability of a delay spike, and its length.
    pub spike_probability: f64,
    #[serde(rename = "spike", with = "ontime_core::duration::text_ns")]
    pub spike_ns: u64,
    /// Probability of answering 503 (no measurement taken).
    pub error_probability: f64,
    /// Probability of closing the connection without an answer.
    pub drop_probability: f64,
    /// Probability of a 200 answer with a truncated JSON body.
    pub malformed_probability: f64,
    /// Probability that one point reports status "fault".
    pub point_fault_probability: f64,
}

impl Faults {
    /// Each delay is at most [`MAX_INJECTED_DELAY_NS`], so the delay of one
    /// answer (fixed + random + spike) neither overflows nor outlasts any
    /// crawler's timeout by more than an hour; probabilities are 0..1.
    ///
    /// [`MAX_INJECTED_DELAY_NS`]: ontime_core::limits::MAX_INJECTED_DELAY_NS
    pub fn validate(&self) -> Result<()> {
        use ontime_core::limits::{duration, MAX_INJECTED_DELAY_NS};
        for (name, ns) in [
            ("delay", self.delay_ns),
            ("delay_random", self.delay_random_ns),
            ("spike", self.spike_ns),
        ] {
            duration(&format!("faults.{name}"), ns, 0, MAX_INJECTED_DELAY_NS).map_err(anyhow::Error::msg)?;
        }
        for (name, p) in [
            ("spike_probability", self.spike_probability),
            ("error_probability", self.error_probability),
            ("drop_probability", self.drop_probability),
            ("malformed_probability", self.malformed_probability),
            ("point_fault_probability", self.point_fault_probability),
        ] {
            if !(0.0..=1.0).contains(&p) {
                bail!("faults.{name} = {p} must be between 0 and 1");
            }
        }
        Ok(())
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct GatewayConfig {
    #[serde(default)]
    pub protocol: Protocol,
    /// Address shared by buildings without their own `listen`.
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// Server worker threads.
    #[serde(default = "default_threads")]
    pub threads: usize,
    /// Scheduling policy of the server threads ("fifo:80" in the lab, so
    /// the contention under test does not delay the answers).
    #[serde(default, with = "ontime_core::rt::policy_text")]
    pub policy: ontime_core::rt::Policy,
    #[serde(default)]
    pub faults: Faults,
    /// Receive-time log, one line per point read.
    #[serde(default)]
    pub log: Option<PathBuf>,
    #[serde(rename = "building")]
    pub buildings: Vec<Building>,
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 8080))
}

fn default_threads() -> usize {
    1
}

impl GatewayConfig {
    /// `count` buildings named b0..b{count-1} with `points` points each; with
    /// `port_per_building`, building i listens on `listen` port + i.
    pub fn generated(listen: SocketAddr, count: u32, points: u32, port_per_building: bool) -> GatewayConfig {
        let buildings = (0..count)
            .map(|i| Building {
                name: format!("b{i}"),
                points,
                analog_percent: default_analog_percent(),
                listen: port_per_building.then(|| {
                    let mut a = listen;
                    // Past 65535 the port wraps; validate() refuses the
                    // duplicate addresses that makes.
                    a.set_port(listen.port().wrapping_add(i as u16));
                    a
                }),
                unit: None,
                device: None,
            })
            .collect();
        GatewayConfig {
            protocol: Protocol::Http,
            listen,
            threads: 1,
            policy: ontime_core::rt::Policy::Other,
            faults: Faults::default(),
            log: None,
            buildings,
        }
    }

    pub fn from_file(path: &Path) -> Result<GatewayConfig> {
        let cfg: GatewayConfig = ontime_core::config::read_toml(path, "gateway config")?;
        cfg.validate().with_context(|| format!("in {}", path.display()))?;
        Ok(cfg)
    }

    /// The one range check of a gateway's size, for flags (before the
    /// buildings are made) and files alike: every building's points are
    /// held in memory, and each worker is a thread.
    pub fn check_size(buildings: u64, total_points: u64, threads: u64) -> Result<()> {
        use ontime_core::limits::{count, MAX_BUILDINGS, MAX_POINTS, MAX_THREADS};
        count("buildings", buildings, 1, MAX_BUILDINGS).map_err(anyhow::Error::msg)?;
        count("points (all buildings)", total_points, 1, MAX_POINTS).map_err(anyhow::Error::msg)?;
        count("threads", threads, 1, MAX_THREADS).map_err(anyhow::Error::msg)?;
        Ok(())
    }

    pub fn validate(&self) -> Result<()> {
        if self.buildings.is_empty() {
            bail!("no building: add at least one [[building]]");
        }
        let points: u64 = self.buildings.iter().map(|b| b.points as u64).sum();
        Self::check_size(self.buildings.len() as u64, points.max(1), self.threads as u64)?;
        let mut seen = std::collections::HashSet::new();
        for b in &self.buildings {
            check_name(&b.name).map_err(anyhow::Error::msg)?;
            if !seen.insert((b.listen.unwrap_or(self.listen), b.name.clone())) {
                bail!("building '{}' is declared twice on the same address", b.name);
            }
            if b.points == 0 {
                bail!("building '{}' has no points", b.name);
            }
            if b.analog_percent > 100 {
                bail!("building '{}': analog_percent must be 0..100", b.name);
            }
        }
        if self.protocol == Protocol::Bacnet {
            let mut addrs = std::collections::HashSet::new();
            for (bi, b) in self.buildings.iter().enumerate() {
                if !addrs.insert(b.listen.unwrap_or(self.listen)) {
                    bail!(
                        "building '{}': BACnet/IP serves one device per address: give each building its own listen (--port-per-building)",
                        b.name
                    );
                }
                if self.device_of(bi) >= (1 << 22) - 1 {
                    bail!(
                        "building '{}': device {} is not a BACnet instance (0..4194302)",
                        b.name,
                        self.device_of(bi)
                    );
                }
            }
        }
        if self.protocol == Protocol::Modbus {
            let mut units = std::collections::HashSet::new();
            for (bi, b) in self.buildings.iter().enumerate() {
                if b.points > 65_536 {
                    bail!(
                        "building '{}': {} points, but Modbus addresses 65536 registers",
                        b.name,
                        b.points
                    );
                }
                let unit = self
                    .unit_of(bi)
                    .ok_or_else(|| anyhow::anyhow!("building '{}': more than 255 units on one address", b.name))?;
                if !units.insert((b.listen.unwrap_or(self.listen), unit)) {
                    bail!("building '{}': unit {unit} is taken on its address", b.name);
                }
            }
        }
        self.faults.validate()
    }

    /// Building `bi`'s BACnet device instance.
    pub fn device_of(&self, bi: usize) -> u32 {
        self.buildings[bi].device.unwrap_or(bi as u32 + 1)
    }

    /// Building `bi`'s Modbus unit id: its own, or its place among the
    /// buildings on its address, from 1 (None past 255).
    pub fn unit_of(&self, bi: usize) -> Option<u8> {
        let b = &self.buildings[bi];
        if let Some(u) = b.unit {
            return Some(u);
        }
        let addr = b.listen.unwrap_or(self.listen);
        let place = self.buildings[..bi]
            .iter()
            .filter(|o| o.listen.unwrap_or(self.listen) == addr)
            .count();
        u8::try_from(place + 1).ok()
    }

    /// Every distinct listen address, in first-use order.
    pub fn listen_addrs(&self) -> Vec<SocketAddr> {
        let mut out: Vec<SocketAddr> = Vec::new();
        for b in &self.buildings {
            let a = b.listen.unwrap_or(self.listen);
            if !out.contains(&a) {
                out.push(a);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_toml_with_faults() {
        let cfg: GatewayConfig = toml::from_str(
            r#"
            listen = "127.0.0.1:9000"
            [faults]
            delay = "2ms"
            error_probability = 0.1
            [[building]]
            name = "hq"
            points = 50
            "#,
        )
        .unwrap();
        cfg.validate().unwrap();
        assert_eq!(cfg.faults.delay_ns, 2_000_000);
        assert_eq!(cfg.buildings[0].analog_percent, 70);
    }

    #[test]
    fn rejects_unknown_keys_and_bad_values() {
        assert!(toml::from_str::<GatewayConfig>("bogus = 1\n[[building]]\nname='a'\npoints=1").is_err());
        let mut cfg = GatewayConfig::generated(default_listen(), 1, 10, false);
        cfg.faults.drop_probability = 2.0;
        assert!(cfg.validate().is_err());
    }

    /// A delay of a million hours was accepted, and with a spike of five
    /// million the answer's delay overflowed a u64.
    #[test]
    fn delays_are_bounded() {
        let mut cfg = GatewayConfig::generated(default_listen(), 1, 10, false);
        cfg.faults.delay_ns = 1_000_000 * 3_600_000_000_000;
        let e = cfg.validate().unwrap_err().to_string();
        assert!(e.contains("faults.delay =") && e.contains("out of range"), "{e}");
        cfg.faults.delay_ns = ontime_core::limits::MAX_INJECTED_DELAY_NS;
        cfg.faults.delay_random_ns = ontime_core::limits::MAX_INJECTED_DELAY_NS;
        cfg.faults.spike_ns = ontime_core::limits::MAX_INJECTED_DELAY_NS;
        cfg.validate().unwrap();
        cfg.faults.spike_ns += 1;
        assert!(cfg.validate().unwrap_err().to_string().contains("faults.spike ="));
    }

    /// Names with spaces or newlines broke the receive log's format.
    #[test]
    fn building_names_are_identifiers() {
        let longest = "x".repeat(MAX_NAME_LEN);
        for good in ["b0", "HQ-north_2", "a.b", longest.as_str()] {
            assert_eq!(check_name(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "a b",
            "b0\n1 b1 0 1",
            "a/b",
            "..",
            ".hidden",
            "\u{e9}t\u{e9}",
            "a\r\nX: 1",
        ] {
            let e = check_name(bad).unwrap_err();
            assert!(
                e.starts_with("building name ") && !e.contains('\n') && !e.contains('\r'),
                "{e}"
            );
        }
        assert!(check_name(&"x".repeat(MAX_NAME_LEN + 1)).unwrap_err().contains("..."));
        let mut cfg = GatewayConfig::generated(default_listen(), 1, 10, false);
        cfg.buildings[0].name = "two words".into();
        assert!(cfg.validate().unwrap_err().to_string().contains("\"two words\""));
    }

    #[test]
    fn port_per_building() {
        let cfg = GatewayConfig::generated("127.0.0.1:7000".parse().unwrap(), 3, 10, true);
        assert_eq!(cfg.listen_addrs().len(), 3);
        assert_eq!(cfg.buildings[2].listen.unwrap().port(), 7002);
    }
}
