//! The crawler's side of the wire: pre-built requests and an allocation-free
//! reader of getValues responses.
//!
//! The crawler speaks HTTP/1.1 itself (httparse for the response head) rather
//! than through an async client, because its sends are timed by absolute
//! timerfd waits on its own threads and no response may allocate. The body
//! is parsed with a serde `DeserializeSeed` that streams each point to a
//! callback instead of building a `Vec`.

use ontime_core::wire::{PointStatus, ReceiveStamp};
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::fmt;

/// Digits of each number in the poll-identity header.
const DIGITS: usize = 20;

/// A stream's request with room for the poll's identity
/// (`X-Ontime-Poll: INDEX PLANNED_NS BOOT_ID`, see `docs/wire.md`): each
/// poll copies the template and writes its numbers in place, so the
/// gateway's log can name the poll exactly and no allocation happens.
#[derive(Clone, Debug)]
pub struct RequestTemplate {
    pub bytes: Vec<u8>,
    index_at: usize,
    planned_at: usize,
}

impl RequestTemplate {
    /// `boot_id`: this host's boot id (CLOCK_MONOTONIC is comparable only
    /// within one boot), or "" when unknown. `host` and `building` go into
    /// the request's head as they are: they come from
    /// [`crate::config::parse_url`], which refuses anything but visible
    /// ASCII, so neither can end a line and inject a header.
    pub fn new(host: &str, building: &str, points: &[u32], boot_id: &str) -> RequestTemplate {
        let body = ontime_core::wire::request_body(points);
        // The boot id is read from /proc; it is one token or none at all.
        let boot_id = if boot_id.bytes().all(|b| b.is_ascii_graphic()) {
            boot_id
        } else {
            ""
        };
        let zeros = "0".repeat(DIGITS);
        let head = format!(
            "POST /{building}/{} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{}: ",
            ontime_core::wire::GET_VALUES,
            body.len(),
            ontime_core::wire::POLL_HEADER,
        );
        let index_at = head.len();
        let planned_at = index_at + DIGITS + 1;
        let boot = if boot_id.is_empty() { "-" } else { boot_id };
        let bytes = format!("{head}{zeros} {zeros} {boot}\r\n\r\n{body}").into_bytes();
        RequestTemplate {
            bytes,
            index_at,
            planned_at,
        }
    }

    /// Writes the request of poll `index`, planned at `planned_ns`, into
    /// `out` (whose capacity the caller keeps).
    pub fn write_into(&self, out: &mut Vec<u8>, index: u64, planned_ns: u64) {
        out.clear();
        out.extend_from_slice(&self.bytes);
        put_digits(&mut out[self.index_at..self.index_at + DIGITS], index);
        put_digits(&mut out[self.planned_at..self.planned_at + DIGITS], planned_ns);
    }

    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

/// Zero-padded decimal, right-aligned in `out`.
fn put_digits(out: &mut [u8], mut v: u64) {
    for b in out.iter_mut().rev() {
        *b = b'0' + (v % 10) as u8;
        v /= 10;
    }
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

/// Frames one HTTP/1.1 response at the start of `buf`: by Content-Length,
/// or by chunked transfer coding, whose chunks are joined in place (the
/// body range then covers the joined data; `len` is still what the response
/// took on the wire). Nothing is changed in `buf` until the whole response
/// is there.
pub fn parse_head(buf: &mut [u8]) -> Parsed {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut resp = httparse::Response::new(&mut headers);
    let head_len = match resp.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(_) => return Parsed::Invalid,
    };
    let status = resp.code.unwrap_or(0);
    let mut content_length = None;
    let mut chunked = false;
    let mut close = resp.version == Some(0);
    for h in resp.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            let v = std::str::from_utf8(h.value)
                .ok()
                .and_then(|v| v.trim().parse::<usize>().ok());
            match (content_length, v) {
                (_, None) => return Parsed::Invalid,
                (Some(a), Some(b)) if a != b => return Parsed::Invalid,
                (_, v) => content_length = v,
            }
        } else if h.name.eq_ignore_ascii_case("connection") {
            close = h
                .value
                .split(|&b| b == b',')
                .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"close"));
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            // Chunked must be the last coding; anything else (gzip ...) is
            // not something the crawler asked for.
            if !h.value.trim_ascii().eq_ignore_ascii_case(b"chunked") {
                return Parsed::Invalid;
            }
            chunked = true;
        }
    }
    if chunked {
        // RFC 9112 6.3: Transfer-Encoding overrides Content-Length.
        return match dechunk(buf, head_len) {
            Chunks::Partial => Parsed::Partial,
            Chunks::Invalid => Parsed::Invalid,
            Chunks::Complete { wire_len, data_len } => Parsed::Complete {
                len: wire_len,
                status,
                close,
                body: (head_len, head_len + data_len),
            },
        };
    }
    // No body for 1xx, 204 and 304; otherwise a response without length
    // would run to the close, which a keep-alive poll cannot wait for.
    let cl = match content_length {
        Some(cl) => cl,
        None if status == 204 || status == 304 || (100..200).contains(&status) => 0,
        None => return Parsed::Invalid,
    };
    let Some(end) = head_len.checked_add(cl) else {
        return Parsed::Invalid;
    };
    if buf.len() < end {
        return Parsed::Partial;
    }
    Parsed::Complete {
        len: end,
        status,
        close,
        body: (head_len, end),
    }
}

enum Chunks {
    Partial,
    Invalid,
    Complete { wire_len: usize, data_len: usize },
}

/// Finds the end of a chunked body starting at `start`; when it is all
/// there, moves the chunks' data together to `start`.
fn dechunk(buf: &mut [u8], start: usize) -> Chunks {
    // Pass 1: check it is complete, touching nothing.
    let mut at = start;
    let mut data_len = 0usize;
    loop {
        let Some(line_end) = find_crlf(&buf[at..]) else {
            return Chunks::Partial;
        };
        let line = &buf[at..at + line_end];
        let hex = line.split(|&b| b == b';').next().unwrap_or(b"").trim_ascii();
        let Some(size) = parse_hex(hex) else {
            return Chunks::Invalid;
        };
        at += line_end + 2;
        if size == 0 {
            // Trailer fields, then an empty line.
            loop {
                let Some(e) = find_crlf(&buf[at..]) else {
                    return Chunks::Partial;
                };
                at += e + 2;
                if e == 0 {
                    break;
                }
            }
            break;
        }
        let Some(next) = at.checked_add(size).and_then(|n| n.checked_add(2)) else {
            return Chunks::Invalid;
        };
        if buf.len() < next {
            return Chunks::Partial;
        }
        if &buf[next - 2..next] != b"\r\n" {
            return Chunks::Invalid;
        }
        data_len += size;
        at = next;
    }
    let wire_len = at;
    // Pass 2: join the data (it only moves towards the start).
    let (mut read, mut write) = (start, start);
    loop {
        let line_end = find_crlf(&buf[read..]).unwrap_or(0);
        let hex = buf[read..read + line_end]
            .split(|&b| b == b';')
            .next()
            .unwrap_or(b"")
            .trim_ascii();
        let size = parse_hex(hex).unwrap_or(0);
        read += line_end + 2;
        if size == 0 {
            break;
        }
        buf.copy_within(read..read + size, write);
        write += size;
        read += size + 2;
    }
    Chunks::Complete { wire_len, data_len }
}

fn find_crlf(b: &[u8]) -> Option<usize> {
    b.windows(2).position(|w| w == b"\r\n")
}

fn parse_hex(b: &[u8]) -> Option<usize> {
    if b.is_empty() || b.len() > 15 {
        return None;
    }
    let mut v = 0usize;
    for &c in b {
        let d = (c as char).to_digit(16)?;
        v = v * 16 + d as usize;
    }
    Some(v)
}

/// One point of a response, as the callback sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PointReading {
    /// The response's `recv_ns`.
    pub recv_ns: u64,
    pub id: u32,
    pub value: Option<f64>,
    pub status: PointStatus,
}

/// The receive time of an answer, and who stamped it (None: the gateway
/// did not say, as gateways before the kernel stamp and other servers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Received {
    pub recv_ns: u64,
    pub stamp: Option<ReceiveStamp>,
    /// When the gateway answered (None: it did not say).
    pub answered_ns: Option<u64>,
}

/// Parses a getValues body, calling `on_point` for each point; returns the
/// gateway's receive time. Fields may come in any order: when `values`
/// precedes `recv_ns`, the body is read twice (no allocation either way).
pub fn parse_body<F: FnMut(PointReading)>(body: &[u8], on_point: &mut F) -> Result<Received, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let first = ResponseSeed {
        on_point: &mut *on_point,
        known_recv: None,
    }
    .deserialize(&mut de)?;
    de.end()?;
    match first {
        Read::Done(r) => Ok(r),
        Read::ValuesFirst(r) => {
            let mut de = serde_json::Deserializer::from_slice(body);
            ResponseSeed {
                on_point,
                known_recv: Some(r.recv_ns),
            }
            .deserialize(&mut de)?;
            Ok(r)
        }
    }
}

enum Read {
    /// Every point was passed on with the receive time.
    Done(Received),
    /// `values` came before `recv_ns` and was skipped: read again.
    ValuesFirst(Received),
}

struct ResponseSeed<'a, F> {
    on_point: &'a mut F,
    /// The receive time, when a first pass found it after `values`.
    known_recv: Option<u64>,
}

impl<'de, F: FnMut(PointReading)> DeserializeSeed<'de> for ResponseSeed<'_, F> {
    type Value = Read;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Read, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, F: FnMut(PointReading)> Visitor<'de> for ResponseSeed<'_, F> {
    type Value = Read;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a getValues response object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Read, A::Error> {
        let mut recv = self.known_recv;
        let mut stamp = None;
        let mut answered_ns = None;
        let mut values = false;
        let mut skipped = false;
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::RecvNs => recv = Some(map.next_value::<u64>()?),
                Key::Stamp => stamp = map.next_value::<StampField>()?.0,
                Key::AnsweredNs => answered_ns = map.next_value::<Option<u64>>()?,
                Key::Values => {
                    match recv {
                        Some(r) => map.next_value_seed(ValuesSeed {
                            recv_ns: r,
                            on_point: &mut *self.on_point,
                        })?,
                        None => {
                            map.next_value::<IgnoredAny>()?;
                            skipped = true;
                        }
                    }
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
        let recv_ns = recv.ok_or_else(|| de::Error::missing_field("recv_ns"))?;
        let r = Received {
            recv_ns,
            stamp,
            answered_ns,
        };
        Ok(if skipped { Read::ValuesFirst(r) } else { Read::Done(r) })
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

/// The `stamp` field; a kind this crawler does not know (a newer
/// gateway's) reads as None, not as a malformed answer.
struct StampField(Option<ReceiveStamp>);

impl<'de> de::Deserialize<'de> for StampField {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<StampField, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = StampField;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a receive-stamp kind")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<StampField, E> {
                Ok(StampField(match s {
                    "kernel" => Some(ReceiveStamp::Kernel),
                    "user" => Some(ReceiveStamp::User),
                    _ => None,
                }))
            }
            fn visit_unit<E: de::Error>(self) -> Result<StampField, E> {
                Ok(StampField(None))
            }
        }
        d.deserialize_any(V)
    }
}

/// Field names of the response, matched without allocating.
enum Key {
    RecvNs,
    Stamp,
    AnsweredNs,
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
                    "stamp" => Key::Stamp,
                    "answered_ns" => Key::AnsweredNs,
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
        } = parse_head(&mut raw)
        else {
            panic!("not complete")
        };
        assert_eq!((status, close), (200, false));
        assert_eq!(len, raw.len() - 12);
        let mut seen = Vec::new();
        let recv = parse_body(&raw[a..b], &mut |p| seen.push(p)).unwrap();
        assert_eq!(
            recv,
            Received {
                recv_ns: 42,
                stamp: None,
                answered_ns: None,
            }
        );
        assert_eq!(seen.len(), 2);
        assert_eq!(seen[1].status, PointStatus::Fault);
    }

    #[test]
    fn partial_and_invalid() {
        let head = |b: &[u8]| parse_head(&mut b.to_vec());
        assert_eq!(head(b"HTTP/1.1 200 OK\r\ncontent-le"), Parsed::Partial);
        assert_eq!(
            head(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc"),
            Parsed::Partial
        );
        assert_eq!(head(b"garbage\r\n\r\n"), Parsed::Invalid);
        assert_eq!(head(b"HTTP/1.1 200 OK\r\n\r\n{}"), Parsed::Invalid);
        assert_eq!(
            head(b"HTTP/1.1 200 OK\r\ncontent-length: 99999999999999999999999\r\n\r\n"),
            Parsed::Invalid
        );
        assert!(parse_body(br#"{"recv_ns":1,"values":[{"id":1,"#, &mut |_| {}).is_err());
        assert!(parse_body(br#"{"values":[]}"#, &mut |_| {}).is_err());
    }

    /// Any valid HTTP/1.1 framing: chunked answers (as servers send when
    /// they stream) are joined in place and read like any other.
    #[test]
    fn chunked_answers_are_framed_and_joined() {
        let mut raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
            b;ext=1\r\n{\"recv_ns\":\r\n\
            4\r\n7,\"v\r\n\
            1d\r\nalues\":[{\"id\":1,\"value\":1,\"st\r\n\
            d\r\natus\":\"ok\"}]}\r\n\
            0\r\nx-trailer: 1\r\n\r\nHTTP/1.1"
            .to_vec();
        let wire = raw.len() - 8;
        for cut in [40, 60, wire - 1] {
            assert_eq!(parse_head(&mut raw[..cut].to_vec()), Parsed::Partial, "cut {cut}");
        }
        let Parsed::Complete { len, body: (a, b), .. } = parse_head(&mut raw) else {
            panic!("not complete")
        };
        assert_eq!(len, wire);
        let mut seen = Vec::new();
        assert_eq!(parse_body(&raw[a..b], &mut |p| seen.push(p)).unwrap().recv_ns, 7);
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].recv_ns, 7);
        let mut bad = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n".to_vec();
        assert_eq!(parse_head(&mut bad), Parsed::Invalid);
        let mut gzip = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n".to_vec();
        assert_eq!(parse_head(&mut gzip), Parsed::Invalid);
    }

    #[test]
    fn fields_may_come_in_any_order() {
        let body = br#"{"values":[{"status":"ok","value":2.5,"id":3}],"extra":{"a":[1]},"recv_ns":9}"#;
        let mut seen = Vec::new();
        assert_eq!(parse_body(body, &mut |p| seen.push(p)).unwrap().recv_ns, 9);
        assert_eq!(seen.len(), 1);
        assert_eq!((seen[0].recv_ns, seen[0].id, seen[0].value), (9, 3, Some(2.5)));
    }

    /// The gateway says who stamped the receive time, before or after the
    /// values; a kind this crawler does not know is not a malformed answer.
    #[test]
    fn the_receive_stamp_kind_is_read_in_any_position() {
        let kernel = br#"{"recv_ns":5,"stamp":"kernel","values":[{"id":1,"value":1.0,"status":"ok"}]}"#;
        let late = br#"{"values":[{"id":1,"value":1.0,"status":"ok"}],"recv_ns":5,"stamp":"user"}"#;
        let newer = br#"{"recv_ns":5,"stamp":"nic","values":[]}"#;
        let mut n = 0;
        assert_eq!(
            parse_body(kernel, &mut |_| n += 1).unwrap(),
            Received {
                recv_ns: 5,
                stamp: Some(ReceiveStamp::Kernel),
                answered_ns: None,
            }
        );
        assert_eq!(
            parse_body(late, &mut |_| n += 1).unwrap().stamp,
            Some(ReceiveStamp::User)
        );
        assert_eq!(parse_body(newer, &mut |_| n += 1).unwrap().stamp, None);
        assert_eq!(n, 2, "every point passed on once");
    }

    /// The gateway's answer stamp, where it gives one, in any position.
    #[test]
    fn the_answer_stamp_is_read_where_given() {
        let after = br#"{"recv_ns":5,"values":[],"answered_ns":9}"#;
        let before = br#"{"answered_ns":8,"values":[{"id":1,"value":1.0,"status":"ok"}],"recv_ns":5}"#;
        assert_eq!(parse_body(after, &mut |_| {}).unwrap().answered_ns, Some(9));
        assert_eq!(parse_body(before, &mut |_| {}).unwrap().answered_ns, Some(8));
        let none = br#"{"recv_ns":5,"values":[],"answered_ns":null}"#;
        assert_eq!(parse_body(none, &mut |_| {}).unwrap().answered_ns, None);
    }

    #[test]
    fn each_poll_names_itself_in_place() {
        let t = RequestTemplate::new("h:1", "b0", &[1], "boot-1");
        let mut out = Vec::with_capacity(t.len());
        t.write_into(&mut out, 42, 1_234_567);
        let s = String::from_utf8(out).unwrap();
        assert!(
            s.contains("\r\nX-Ontime-Poll: 00000000000000000042 00000000000001234567 boot-1\r\n\r\n{"),
            "{s}"
        );
    }

    #[test]
    fn request_is_well_formed() {
        let r = RequestTemplate::new("127.0.0.1:8080", "b0", &[1, 2], "").bytes;
        let s = String::from_utf8(r).unwrap();
        assert!(s.starts_with("POST /b0/getValues HTTP/1.1\r\n"));
        assert!(s.ends_with("\r\n\r\n{\"points\":[1,2]}"));
    }
}

#[cfg(test)]
mod props {
    use super::*;
    use proptest::prelude::*;

    fn chunked(body: &[u8], cuts: &[usize]) -> Vec<u8> {
        let mut out = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        let mut at = 0;
        let mut bounds: Vec<usize> = cuts.iter().map(|c| c % (body.len() + 1)).collect();
        bounds.push(body.len());
        bounds.sort_unstable();
        for b in bounds {
            if b > at {
                out.extend_from_slice(format!("{:x}\r\n", b - at).as_bytes());
                out.extend_from_slice(&body[at..b]);
                out.extend_from_slice(b"\r\n");
                at = b;
            }
        }
        out.extend_from_slice(b"0\r\n\r\n");
        out
    }

    proptest! {
        /// Whatever a server sends, framing and parsing give an answer or
        /// a refusal, never a panic or a read past the buffer.
        #[test]
        fn any_bytes_frame_or_are_refused(mut raw in proptest::collection::vec(any::<u8>(), 0..600)) {
            if let Parsed::Complete { len, body: (a, b), .. } = parse_head(&mut raw) {
                prop_assert!(a <= b && b <= len && len <= raw.len());
                let _ = parse_body(&raw[a..b], &mut |_| {});
            }
        }

        #[test]
        fn any_head_with_noise_is_safe(head in "HTTP/1\\.[01] [0-9]{3} OK\r\n([A-Za-z-]{1,20}: [ -~]{0,20}\r\n){0,6}\r\n", tail in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut raw = head.into_bytes();
            raw.extend_from_slice(&tail);
            if let Parsed::Complete { len, body: (a, b), .. } = parse_head(&mut raw) {
                prop_assert!(a <= b && b <= len && len <= raw.len());
            }
        }

        /// A chunked answer cut anywhere reads as the same body.
        #[test]
        fn chunked_answers_join_to_the_body(body in proptest::collection::vec(any::<u8>(), 0..300), cuts in proptest::collection::vec(any::<usize>(), 0..8)) {
            let mut raw = chunked(&body, &cuts);
            let wire = raw.len();
            match parse_head(&mut raw) {
                Parsed::Complete { len, body: (a, b), .. } => {
                    prop_assert_eq!(len, wire);
                    prop_assert_eq!(&raw[a..b], &body[..]);
                }
                other => prop_assert!(false, "{:?}", other),
            }
        }

        /// Any getValues answer, with its fields in any order, yields its
        /// points with the receive time.
        #[test]
        fn answers_parse_in_any_field_order(recv in any::<u64>(), ids in proptest::collection::vec(any::<u32>(), 0..20), values_first in any::<bool>()) {
            let values: Vec<String> = ids.iter().map(|i| format!(r#"{{"id":{i},"value":1.5,"status":"ok"}}"#)).collect();
            let values = format!("[{}]", values.join(","));
            let body = if values_first {
                format!(r#"{{"values":{values},"recv_ns":{recv}}}"#)
            } else {
                format!(r#"{{"recv_ns":{recv},"values":{values}}}"#)
            };
            let mut seen = Vec::new();
            prop_assert_eq!(parse_body(body.as_bytes(), &mut |p| seen.push((p.recv_ns, p.id))).unwrap().recv_ns, recv);
            let want: Vec<(u64, u32)> = ids.iter().map(|&i| (recv, i)).collect();
            prop_assert_eq!(seen, want);
        }
    }
}
