//! The crawler's side of the wire: pre-built requests and an allocation-free
//! reader of getValues responses.
//!
//! The crawler speaks HTTP/1.1 itself (httparse for the response head) rather
//! than through an async client, because its sends are timed by absolute
//! timerfd waits on its own threads and no response may allocate. The body
//! is parsed with a serde `DeserializeSeed` that streams each point to a
//! callback instead of building a `Vec`.

use ontime_gateway::wire::PointStatus;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::fmt;

/// A complete HTTP/1.1 request for one poll of `points`.
pub fn build_request(host: &str, building: &str, points: &[u32]) -> Vec<u8> {
    let body = ontime_gateway::wire::request_body(points);
    format!(
        "POST /{building}/{} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        ontime_gateway::wire::GET_VALUES,
        body.len()
    )
    .into_bytes()
}

/// What a complete response in a buffer says.
#[derive(Debug, PartialEq)]
pub enum Parsed {
    /// More bytes are needed.
    Partial,
    /// A response of `len` bytes: HTTP status, whether the server will close
    /// the connection, and the body's range in the buffer.
    Complete {
        len: usize,
        status: u16,
        close: bool,
        body: (usize, usize),
    },
    /// Not HTTP, or a head the crawler cannot frame (no Content-Length).
    Invalid,
}

/// Frames one HTTP/1.1 response at the start of `buf`.
pub fn parse_head(buf: &[u8]) -> Parsed {
    let mut headers = [httparse::EMPTY_HEADER; 16];
    let mut resp = httparse::Response::new(&mut headers);
    let head_len = match resp.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(_) => return Parsed::Invalid,
    };
    let status = resp.code.unwrap_or(0);
    let mut content_length = None;
    let mut close = resp.version == Some(0);
    for h in resp.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            content_length = std::str::from_utf8(h.value)
                .ok()
                .and_then(|v| v.trim().parse::<usize>().ok());
        } else if h.name.eq_ignore_ascii_case("connection") {
            close = h.value.eq_ignore_ascii_case(b"close");
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            return Parsed::Invalid;
        }
    }
    let Some(cl) = content_length else {
        return Parsed::Invalid;
    };
    if buf.len() < head_len + cl {
        return Parsed::Partial;
    }
    Parsed::Complete {
        len: head_len + cl,
        status,
        close,
        body: (head_len, head_len + cl),
    }
}

/// One point of a response, as the callback sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PointReading {
    /// The response's `recv_ns` if it came before `values` (as the gateway
    /// writes it), else 0.
    pub recv_ns: u64,
    pub id: u32,
    pub value: Option<f64>,
    pub status: PointStatus,
}

/// Parses a getValues body, calling `on_point` for each point; returns the
/// gateway's receive time. No allocation for well-formed bodies.
pub fn parse_body<F: FnMut(PointReading)>(body: &[u8], on_point: &mut F) -> Result<u64, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let recv = ResponseSeed { on_point }.deserialize(&mut de)?;
    de.end()?;
    Ok(recv)
}

struct ResponseSeed<'a, F> {
    on_point: &'a mut F,
}

impl<'de, F: FnMut(PointReading)> DeserializeSeed<'de> for ResponseSeed<'_, F> {
    type Value = u64;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<u64, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, F: FnMut(PointReading)> Visitor<'de> for ResponseSeed<'_, F> {
    type Value = u64;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a getValues response object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<u64, A::Error> {
        let mut recv = None;
        let mut values = false;
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::RecvNs => recv = Some(map.next_value::<u64>()?),
                Key::Values => {
                    map.next_value_seed(ValuesSeed {
                        recv_ns: recv.unwrap_or(0),
                        on_point: &mut *self.on_point,
                    })?;
                    values = true;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        if !values {
            return Err(de::Error::missing_field("values"));
        }
        recv.ok_or_else(|| de::Error::missing_field("recv_ns"))
    }
}

struct ValuesSeed<'a, F> {
    recv_ns: u64,
    on_point: &'a mut F,
}

impl<'de, F: FnMut(PointReading)> DeserializeSeed<'de> for ValuesSeed<'_, F> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de, F: FnMut(PointReading)> Visitor<'de> for ValuesSeed<'_, F> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of point values")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(p) = seq.next_element::<PointRaw>()? {
            (self.on_point)(PointReading {
                recv_ns: self.recv_ns,
                id: p.id,
                value: p.value,
                status: p.status,
            });
        }
        Ok(())
    }
}

#[derive(serde::Deserialize)]
struct PointRaw {
    id: u32,
    value: Option<f64>,
    status: PointStatus,
}

/// Field names of the response, matched without allocating.
enum Key {
    RecvNs,
    Values,
    Other,
}

impl<'de> de::Deserialize<'de> for Key {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Key, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Key, E> {
                Ok(match s {
                    "recv_ns" => Key::RecvNs,
                    "values" => Key::Values,
                    _ => Key::Other,
                })
            }
        }
        d.deserialize_identifier(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_and_parses_a_response() {
        let body =
            br#"{"recv_ns":42,"values":[{"id":1,"value":21.5,"status":"ok"},{"id":2,"value":null,"status":"fault"}]}"#;
        let mut raw = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len()).into_bytes();
        raw.extend_from_slice(body);
        raw.extend_from_slice(b"HTTP/1.1 200"); // start of the next response
        let Parsed::Complete {
            len,
            status,
            close,
            body: (a, b),
        } = parse_head(&raw)
        else {
            panic!("not complete")
        };
        assert_eq!((status, close), (200, false));
        assert_eq!(len, raw.len() - 12);
        let mut seen = Vec::new();
        let recv = parse_body(&raw[a..b], &mut |p| seen.push(p)).unwrap();
        assert_eq!(recv, 42);
        assert_eq!(seen.len(), 2);
        assert_eq!(seen[1].status, PointStatus::Fault);
    }

    #[test]
    fn partial_and_invalid() {
        assert_eq!(parse_head(b"HTTP/1.1 200 OK\r\ncontent-le"), Parsed::Partial);
        assert_eq!(
            parse_head(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc"),
            Parsed::Partial
        );
        assert_eq!(parse_head(b"garbage\r\n\r\n"), Parsed::Invalid);
        assert!(parse_body(br#"{"recv_ns":1,"values":[{"id":1,"#, &mut |_| {}).is_err());
        assert!(parse_body(br#"{"values":[]}"#, &mut |_| {}).is_err());
    }

    #[test]
    fn request_is_well_formed() {
        let r = build_request("127.0.0.1:8080", "b0", &[1, 2]);
        let s = String::from_utf8(r).unwrap();
        assert!(s.starts_with("POST /b0/getValues HTTP/1.1\r\n"));
        assert!(s.ends_with("\r\n\r\n{\"points\":[1,2]}"));
    }
}
