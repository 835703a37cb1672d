//! The wire format of a batch point read, in the spirit of BACnet/WS
//! `getValues`. See `docs/wire.md` for the full description.
//!
//! ```text
//! POST /<building>/getValues HTTP/1.1
//! Content-Type: application/json
//!
//! {"points":[0,1,2]}
//!
//! HTTP/1.1 200 OK
//! {"recv_ns":123456789,"values":[{"id":0,"value":21.37,"status":"ok"},...]}
//! ```
//!
//! `recv_ns` is the gateway's CLOCK_MONOTONIC time when the request arrived:
//! the measurement time of every point in the response.

use serde::{Deserialize, Serialize};

/// Path suffix of the batch read under a building's prefix.
pub const GET_VALUES: &str = "getValues";

/// The most points one request may name.
pub const MAX_POINTS_PER_REQUEST: usize = 1000;

/// Header by which ontime's crawler names each poll: `INDEX PLANNED_NS
/// BOOT_ID` (the poll's number in its stream, its planned send time on
/// CLOCK_MONOTONIC, and the crawler host's boot id, without which the
/// planned time cannot be compared). Other clients need not send it.
pub const POLL_HEADER: &str = "X-Ontime-Poll";

/// A poll's identity as the gateway read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PollId {
    pub index: u64,
    /// The crawler's planned send time, when the crawler runs on this
    /// boot of this host (same CLOCK_MONOTONIC).
    pub planned_ns: Option<u64>,
}

/// Reads the poll-identity header; `own_boot_id` decides whether the
/// planned time is comparable with this host's clock.
pub fn parse_poll_id(value: &[u8], own_boot_id: &str) -> Option<PollId> {
    let text = std::str::from_utf8(value).ok()?;
    let mut f = text.split_ascii_whitespace();
    let index = f.next()?.parse().ok()?;
    let planned: Option<u64> = f.next().and_then(|p| p.parse().ok());
    let boot = f.next().unwrap_or("-");
    let same_clock = !own_boot_id.is_empty() && boot == own_boot_id;
    Some(PollId {
        index,
        planned_ns: planned.filter(|_| same_clock),
    })
}

/// This host's boot id ("" when unreadable).
pub fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Largest accepted request body in bytes.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GetValuesRequest {
    pub points: Vec<u32>,
}

/// Status of one point in a response.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PointStatus {
    /// The controller answered.
    Ok,
    /// The controller did not answer for this point (injected).
    Fault,
    /// The building has no point with this id.
    UnknownPoint,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct PointValue {
    pub id: u32,
    pub value: Option<f64>,
    pub status: PointStatus,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct GetValuesResponse {
    /// When the request arrived (CLOCK_MONOTONIC ns of the gateway's host).
    pub recv_ns: u64,
    /// Which clock took `recv_ns`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stamp: Option<ReceiveStamp>,
    /// When the gateway answered, after its controller delay and any
    /// stall (same clock as `recv_ns`): what the gateway itself took of a
    /// round trip is answered − recv.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answered_ns: Option<u64>,
    pub values: Vec<PointValue>,
}

/// Who stamped a request's receive time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReceiveStamp {
    /// The kernel, when the segment entered the gateway's network stack
    /// (`SO_TIMESTAMPNS`): untouched by the gateway's own scheduling.
    Kernel,
    /// The gateway's handler, when it ran.
    User,
}

/// Body of every 4xx/5xx response.
#[derive(Debug, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: String,
}

/// Reads a getValues request body: JSON, no unknown fields, 1 ..=
/// [`MAX_POINTS_PER_REQUEST`] points. The error is the reason for a 400.
pub fn parse_request(body: &[u8]) -> Result<GetValuesRequest, String> {
    if body.len() > MAX_BODY_BYTES {
        return Err(format!("body larger than {MAX_BODY_BYTES} bytes"));
    }
    let request: GetValuesRequest =
        serde_json::from_slice(body).map_err(|e| format!("body is not a getValues request: {e}"))?;
    if request.points.is_empty() || request.points.len() > MAX_POINTS_PER_REQUEST {
        return Err(format!(
            "a request names 1..{MAX_POINTS_PER_REQUEST} points, not {}",
            request.points.len()
        ));
    }
    Ok(request)
}

/// The request body for a list of points, as the crawler pre-builds it.
pub fn request_body(points: &[u32]) -> String {
    let mut s = String::with_capacity(12 + points.len() * 6);
    s.push_str("{\"points\":[");
    for (i, p) in points.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        s.push_str(&p.to_string());
    }
    s.push_str("]}");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_body_round_trips() {
        let body = request_body(&[3, 4, 5]);
        let r: GetValuesRequest = serde_json::from_str(&body).unwrap();
        assert_eq!(r.points, vec![3, 4, 5]);
    }
}
