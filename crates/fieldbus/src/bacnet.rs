//! BACnet/IP, the subset a poller of present values needs: BVLC (Annex
//! J), the NPDU header (clause 6.2), ReadPropertyMultiple of
//! present-value (15.7) and its answers: ComplexACK, Error, Reject and
//! Abort (20.1), and Who-Is / I-Am (16.10, 16.9) to learn a device's
//! largest APDU and whether it segments.
//!
//! Segmented answers are not reassembled: a request is sized to fit the
//! device's APDU unsegmented, and a segmented ComplexACK is reported as
//! such (the poll is a device error, not a value). Both sides: the
//! crawler's requests and the gateway's answers; checked against frames
//! bacpypes3 0.0.110 produced.

/// The port BACnet/IP uses unless told otherwise (0xBAC0).
pub const DEFAULT_PORT: u16 = 47808;
/// BVLC type of BACnet/IP.
const BVLC_TYPE: u8 = 0x81;
const BVLC_FORWARDED: u8 = 0x04;
const BVLC_UNICAST: u8 = 0x0A;
const BVLC_BROADCAST: u8 = 0x0B;
/// BVLC header, NPDU (version and control, no addresses), confirmed
/// request header (type, max segments and APDU, invoke id, service).
pub const RPM_HEADER_LEN: usize = 4 + 2 + 4;
/// One object's specification in a ReadPropertyMultiple request:
/// [0] object id, [1] { [0] present-value }.
pub const RPM_OBJECT_LEN: usize = 9;
/// Where a request's invoke id is, to put a poll's in place.
pub const INVOKE_AT: usize = 8;

pub const SERVICE_READ_PROPERTY_MULTIPLE: u8 = 14;
pub const PROPERTY_PRESENT_VALUE: u8 = 85;

/// An object identifier: a 10-bit type and a 22-bit instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ObjectId(pub u32);

impl ObjectId {
    pub const ANALOG_INPUT: u16 = 0;
    pub const ANALOG_OUTPUT: u16 = 1;
    pub const ANALOG_VALUE: u16 = 2;
    pub const BINARY_INPUT: u16 = 3;
    pub const BINARY_VALUE: u16 = 5;
    pub const DEVICE: u16 = 8;

    /// None past the 22-bit instance or 10-bit type.
    pub fn new(object_type: u16, instance: u32) -> Option<ObjectId> {
        (object_type < 1024 && instance < 1 << 22).then_some(ObjectId((object_type as u32) << 22 | instance))
    }

    pub fn object_type(self) -> u16 {
        (self.0 >> 22) as u16
    }

    pub fn instance(self) -> u32 {
        self.0 & ((1 << 22) - 1)
    }
}

/// The largest APDU a device accepts, by its code in a confirmed request
/// (20.1.2.5).
pub const MAX_APDU_BY_CODE: [u16; 6] = [50, 128, 206, 480, 1024, 1476];

/// The code of the largest APDU length at most `bytes`.
pub fn max_apdu_code(bytes: u16) -> u8 {
    MAX_APDU_BY_CODE.iter().rposition(|&b| b <= bytes).unwrap_or(0) as u8
}

/// How many objects' present values fit one unsegmented ComplexACK of at
/// most `max_apdu` bytes: 3 bytes of header, and per object its id and
/// tags (9 bytes) with a value of at most 9 (a DOUBLE) and its tags (3).
pub fn objects_per_request(max_apdu: u16) -> usize {
    ((max_apdu as usize).saturating_sub(3) / (9 + 3 + 9)).max(1)
}

/// Writes a ReadPropertyMultiple request for the present value of
/// `objects` into `out`; returns its length, or None when `out` is too
/// small or the datagram would pass 65535 bytes. `max_apdu_code`: the
/// largest answer this client accepts ([`max_apdu_code`]); segmented
/// answers are not accepted.
pub fn encode_rpm(invoke: u8, max_apdu_code: u8, objects: &[ObjectId], out: &mut [u8]) -> Option<usize> {
    let len = RPM_HEADER_LEN + RPM_OBJECT_LEN * objects.len();
    if len > out.len() || len > u16::MAX as usize {
        return None;
    }
    out[..RPM_HEADER_LEN].copy_from_slice(&[
        BVLC_TYPE,
        BVLC_UNICAST,
        (len >> 8) as u8,
        len as u8,
        0x01,
        0x04, // expecting a reply
        0x00, // confirmed request, not segmented, segmented answers not accepted
        max_apdu_code & 0x0F,
        invoke,
        SERVICE_READ_PROPERTY_MULTIPLE,
    ]);
    for (i, o) in objects.iter().enumerate() {
        let at = RPM_HEADER_LEN + RPM_OBJECT_LEN * i;
        let [a, b, c, d] = o.0.to_be_bytes();
        out[at..at + RPM_OBJECT_LEN].copy_from_slice(&[0x0C, a, b, c, d, 0x1E, 0x09, PROPERTY_PRESENT_VALUE, 0x1F]);
    }
    Some(len)
}

/// A Who-Is for device `instance` alone (its range low and high limits,
/// each in as few bytes as it takes, as bacpypes3 writes them).
pub fn encode_who_is(instance: u32, out: &mut [u8; 18]) -> usize {
    let be = instance.min((1 << 22) - 1).to_be_bytes();
    let skip = be.iter().take(3).take_while(|&&b| b == 0).count();
    let digits = &be[skip..];
    out[..8].copy_from_slice(&[BVLC_TYPE, BVLC_UNICAST, 0, 0, 0x01, 0x00, 0x10, 0x08]);
    let mut n = 8;
    for tag in [0x08u8, 0x18] {
        out[n] = tag | digits.len() as u8;
        out[n + 1..n + 1 + digits.len()].copy_from_slice(digits);
        n += 1 + digits.len();
    }
    out[3] = n as u8;
    n
}

/// The APDU of a BACnet/IP datagram, and who sent it when it was
/// forwarded by a BBMD (its original IPv4 address and port).
pub fn apdu_of(datagram: &[u8]) -> Result<&[u8], &'static str> {
    if datagram.len() < 4 || datagram[0] != BVLC_TYPE {
        return Err("not BACnet/IP (BVLC type is not 0x81)");
    }
    if u16::from_be_bytes([datagram[2], datagram[3]]) as usize != datagram.len() {
        return Err("BVLC length does not match the datagram");
    }
    let npdu = match datagram[1] {
        BVLC_UNICAST | BVLC_BROADCAST => &datagram[4..],
        BVLC_FORWARDED => datagram.get(10..).ok_or("a forwarded NPDU without its origin")?,
        _ => return Err("a BVLC function that carries no NPDU"),
    };
    if npdu.len() < 2 || npdu[0] != 0x01 {
        return Err("not a BACnet NPDU (version is not 1)");
    }
    let control = npdu[1];
    if control & 0x80 != 0 {
        return Err("a network layer message, not an APDU");
    }
    let mut at = 2;
    // DNET, DLEN, DADR; then SNET, SLEN, SADR; then the hop count.
    if control & 0x20 != 0 {
        let dlen = *npdu.get(at + 2).ok_or("short NPDU")? as usize;
        at += 3 + dlen;
    }
    if control & 0x08 != 0 {
        let slen = *npdu.get(at + 2).ok_or("short NPDU")? as usize;
        at += 3 + slen;
    }
    if control & 0x20 != 0 {
        at += 1;
    }
    npdu.get(at..).filter(|a| !a.is_empty()).ok_or("no APDU")
}

/// What a device answered to a confirmed request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer<'a> {
    /// An unsegmented ComplexACK: the service's data.
    Ack {
        invoke: u8,
        service: u8,
        data: &'a [u8],
    },
    /// A ComplexACK in segments, which this codec does not reassemble.
    Segmented {
        invoke: u8,
    },
    Error {
        invoke: u8,
        class: u32,
        code: u32,
    },
    Reject {
        invoke: u8,
        reason: u8,
    },
    Abort {
        invoke: u8,
        reason: u8,
        by_server: bool,
    },
    /// Anything else a device may send (I-Am, a SimpleACK).
    Other,
}

pub fn parse_answer(apdu: &[u8]) -> Result<Answer<'_>, &'static str> {
    let b0 = *apdu.first().ok_or("empty APDU")?;
    let get = |i: usize| apdu.get(i).copied().ok_or("short APDU");
    Ok(match b0 >> 4 {
        3 if b0 & 0x08 != 0 => Answer::Segmented { invoke: get(1)? },
        3 => Answer::Ack {
            invoke: get(1)?,
            service: get(2)?,
            data: &apdu[3..],
        },
        5 => {
            let mut r = Reader::new(apdu.get(3..).ok_or("short APDU")?);
            let class = r.application_enumerated()?;
            let code = r.application_enumerated()?;
            Answer::Error {
                invoke: get(1)?,
                class,
                code,
            }
        }
        6 => Answer::Reject {
            invoke: get(1)?,
            reason: get(2)?,
        },
        7 => Answer::Abort {
            invoke: get(1)?,
            reason: get(2)?,
            by_server: b0 & 0x01 != 0,
        },
        _ => Answer::Other,
    })
}

/// One object's present value in a ReadPropertyMultiple answer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Reading {
    /// REAL, DOUBLE, unsigned, signed, enumerated (binary and multi-state
    /// objects) and boolean values as numbers.
    Value(f64),
    /// A value of another type (a string, a bit string, null).
    NotANumber,
    /// The device's error for this object (an unknown object: class 1,
    /// code 31).
    Error { class: u32, code: u32 },
}

/// Reads a ReadPropertyMultiple ACK's data, calling `on` for each
/// object's present value, in place; an error for a whole malformed
/// answer.
pub fn parse_rpm_ack(data: &[u8], on: &mut impl FnMut(ObjectId, Reading)) -> Result<(), &'static str> {
    let mut r = Reader::new(data);
    while !r.done() {
        let id = r.context_object_id(0)?;
        r.opening(1)?;
        while !r.peek_closing(1) {
            let property = r.context_unsigned(2)?;
            if r.peek_context(3) {
                r.context_unsigned(3)?;
            }
            if r.peek_opening(4) {
                r.opening(4)?;
                let v = r.application_value()?;
                r.closing(4)?;
                if property == PROPERTY_PRESENT_VALUE as u32 {
                    on(id, v);
                }
            } else {
                r.opening(5)?;
                let class = r.application_enumerated()?;
                let code = r.application_enumerated()?;
                r.closing(5)?;
                if property == PROPERTY_PRESENT_VALUE as u32 {
                    on(id, Reading::Error { class, code });
                }
            }
        }
        r.closing(1)?;
    }
    Ok(())
}

/// What a device says of itself in an I-Am.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IAm {
    pub device: u32,
    pub max_apdu: u32,
    /// 0 both, 1 transmit, 2 receive, 3 none.
    pub segmentation: u32,
    pub vendor: u32,
}

/// An I-Am's APDU, or None for any other.
pub fn parse_i_am(apdu: &[u8]) -> Option<IAm> {
    if apdu.len() < 2 || apdu[0] != 0x10 || apdu[1] != 0x00 {
        return None;
    }
    let mut r = Reader::new(&apdu[2..]);
    let (tag, content) = r.application()?;
    if tag != 12 || content.len() != 4 {
        return None;
    }
    let device = ObjectId(u32::from_be_bytes(content.try_into().ok()?)).instance();
    let max_apdu = r.application_unsigned().ok()?;
    let segmentation = r.application_enumerated().ok()?;
    let vendor = r.application_unsigned().ok()?;
    Some(IAm {
        device,
        max_apdu,
        segmentation,
        vendor,
    })
}

/// A confirmed request a server received: its invoke id, the largest
/// answer the client accepts, whether it accepts a segmented one, the
/// service and its data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Confirmed<'a> {
    pub invoke: u8,
    pub max_apdu: u16,
    pub segmented_accepted: bool,
    pub service: u8,
    pub data: &'a [u8],
}

/// What a client sent a server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request<'a> {
    Confirmed(Confirmed<'a>),
    /// Who-Is, with its range of device instances if it has one.
    WhoIs(Option<(u32, u32)>),
    Other,
}

pub fn parse_request(apdu: &[u8]) -> Result<Request<'_>, &'static str> {
    let b0 = *apdu.first().ok_or("empty APDU")?;
    match b0 >> 4 {
        0 => {
            if b0 & 0x08 != 0 {
                return Err("a segmented request");
            }
            let h = apdu.get(..4).ok_or("short confirmed request")?;
            Ok(Request::Confirmed(Confirmed {
                invoke: h[2],
                max_apdu: MAX_APDU_BY_CODE.get((h[1] & 0x0F) as usize).copied().unwrap_or(50),
                segmented_accepted: b0 & 0x02 != 0,
                service: h[3],
                data: &apdu[4..],
            }))
        }
        1 if apdu.get(1) == Some(&0x08) => {
            let mut r = Reader::new(&apdu[2..]);
            if r.done() {
                return Ok(Request::WhoIs(None));
            }
            let low = r.context_unsigned(0)?;
            let high = r.context_unsigned(1)?;
            Ok(Request::WhoIs(Some((low, high))))
        }
        _ => Ok(Request::Other),
    }
}

/// Reads a ReadPropertyMultiple request's data: each object and the
/// properties asked of it (`on(object, property)`); an error when it is
/// not one.
pub fn parse_rpm_request(data: &[u8], on: &mut impl FnMut(ObjectId, u32)) -> Result<(), &'static str> {
    let mut r = Reader::new(data);
    if r.done() {
        return Err("no object asked for");
    }
    while !r.done() {
        let id = r.context_object_id(0)?;
        r.opening(1)?;
        while !r.peek_closing(1) {
            let property = r.context_unsigned(0)?;
            if r.peek_context(1) {
                r.context_unsigned(1)?;
            }
            on(id, property);
        }
        r.closing(1)?;
    }
    Ok(())
}

/// Reads a ReadProperty request's data (15.5): the object and the
/// property, or None when it is not one.
pub fn parse_read_property(data: &[u8]) -> Option<(ObjectId, u32)> {
    let mut r = Reader::new(data);
    let id = r.context_object_id(0).ok()?;
    let property = r.context_unsigned(1).ok()?;
    Some((id, property))
}

pub const SERVICE_READ_PROPERTY: u8 = 12;

/// Writes answers into a buffer the caller owns, for a server: the BVLC
/// length is set when it is finished.
pub struct AnswerWriter<'a> {
    out: &'a mut [u8],
    n: usize,
    overflow: bool,
}

impl<'a> AnswerWriter<'a> {
    fn start(out: &'a mut [u8], apdu_head: &[u8]) -> AnswerWriter<'a> {
        let mut w = AnswerWriter {
            out,
            n: 0,
            overflow: false,
        };
        w.put(&[BVLC_TYPE, BVLC_UNICAST, 0, 0, 0x01, 0x00]);
        w.put(apdu_head);
        w
    }

    /// A ComplexACK to ReadPropertyMultiple; add objects, then finish.
    pub fn rpm_ack(out: &'a mut [u8], invoke: u8) -> AnswerWriter<'a> {
        AnswerWriter::start(out, &[0x30, invoke, SERVICE_READ_PROPERTY_MULTIPLE])
    }

    fn put(&mut self, b: &[u8]) {
        match self.out.get_mut(self.n..self.n + b.len()) {
            Some(dst) => {
                dst.copy_from_slice(b);
                self.n += b.len();
            }
            None => self.overflow = true,
        }
    }

    /// One object's present value: a REAL.
    pub fn value(&mut self, id: ObjectId, v: f32) {
        let [a, b, c, d] = id.0.to_be_bytes();
        let [e, f, g, h] = v.to_be_bytes();
        self.put(&[
            0x0C,
            a,
            b,
            c,
            d,
            0x1E,
            0x29,
            PROPERTY_PRESENT_VALUE,
            0x4E,
            0x44,
            e,
            f,
            g,
            h,
            0x4F,
            0x1F,
        ]);
    }

    /// One object's error in place of its value.
    pub fn error(&mut self, id: ObjectId, class: u8, code: u8) {
        let [a, b, c, d] = id.0.to_be_bytes();
        self.put(&[
            0x0C,
            a,
            b,
            c,
            d,
            0x1E,
            0x29,
            PROPERTY_PRESENT_VALUE,
            0x5E,
            0x91,
            class,
            0x91,
            code,
            0x5F,
            0x1F,
        ]);
    }

    /// The APDU's length so far (without BVLC and NPDU).
    pub fn apdu_len(&self) -> usize {
        self.n - 6
    }

    /// The datagram's length, or None when it did not fit.
    pub fn finish(self) -> Option<usize> {
        if self.overflow || self.n > u16::MAX as usize {
            return None;
        }
        self.out[2..4].copy_from_slice(&(self.n as u16).to_be_bytes());
        Some(self.n)
    }
}

/// An Error PDU for a confirmed request.
pub fn encode_error(invoke: u8, service: u8, class: u8, code: u8, out: &mut [u8; 13]) -> usize {
    *out = [
        BVLC_TYPE,
        BVLC_UNICAST,
        0,
        13,
        0x01,
        0x00,
        0x50,
        invoke,
        service,
        0x91,
        class,
        0x91,
        code,
    ];
    13
}

/// A Reject (`abort = false`) or a server's Abort PDU.
pub fn encode_refusal(abort: bool, invoke: u8, reason: u8, out: &mut [u8; 9]) -> usize {
    *out = [
        BVLC_TYPE,
        BVLC_UNICAST,
        0,
        9,
        0x01,
        0x00,
        if abort { 0x71 } else { 0x60 },
        invoke,
        reason,
    ];
    9
}

/// An I-Am for `device`: its largest APDU, no segmentation, `vendor`.
pub fn encode_i_am(device: u32, max_apdu: u16, vendor: u16, out: &mut [u8; 21]) -> usize {
    let id = ObjectId::new(ObjectId::DEVICE, device.min((1 << 22) - 1)).map_or(0, |o| o.0);
    let [a, b, c, d] = id.to_be_bytes();
    let [e, f] = max_apdu.to_be_bytes();
    let [g, h] = vendor.to_be_bytes();
    *out = [
        BVLC_TYPE,
        BVLC_UNICAST,
        0,
        21,
        0x01,
        0x00,
        0x10,
        0x00,
        0xC4,
        a,
        b,
        c,
        d,
        0x22,
        e,
        f,
        0x91,
        0x03,
        0x22,
        g,
        h,
    ];
    21
}

pub const ERROR_CLASS_DEVICE: u8 = 0;
pub const ERROR_CLASS_OBJECT: u8 = 1;
pub const ERROR_CODE_OPERATIONAL_PROBLEM: u8 = 25;
pub const ERROR_CODE_UNKNOWN_OBJECT: u8 = 31;
pub const ERROR_CODE_UNKNOWN_PROPERTY: u8 = 32;
pub const REJECT_UNRECOGNIZED_SERVICE: u8 = 9;
pub const REJECT_INVALID_TAG: u8 = 4;
pub const ABORT_SEGMENTATION_NOT_SUPPORTED: u8 = 4;

/// Reads tagged data (20.2.1) in place.
struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

/// A tag's number, whether it is a context tag, and its length/value/type
/// field, with the bytes the tag itself took.
struct Tag {
    number: u8,
    context: bool,
    lvt: u8,
    len: usize,
}

impl<'a> Reader<'a> {
    fn new(b: &'a [u8]) -> Reader<'a> {
        Reader { b, at: 0 }
    }

    fn done(&self) -> bool {
        self.at >= self.b.len()
    }

    fn byte(&self, i: usize) -> Result<u8, &'static str> {
        self.b.get(self.at + i).copied().ok_or("answer ends inside a tag")
    }

    fn tag(&self) -> Result<Tag, &'static str> {
        let b0 = self.byte(0)?;
        let mut len = 1;
        let mut number = b0 >> 4;
        if number == 15 {
            number = self.byte(1)?;
            len += 1;
        }
        Ok(Tag {
            number,
            context: b0 & 0x08 != 0,
            lvt: b0 & 0x07,
            len,
        })
    }

    /// A tag with content: its number, whether context, and the content.
    fn tagged(&mut self) -> Result<(u8, bool, &'a [u8]), &'static str> {
        let t = self.tag()?;
        if t.context && t.lvt >= 6 {
            return Err("an opening or closing tag where a value was expected");
        }
        let mut head = t.len;
        let len = if !t.context && t.number == 1 {
            // A boolean's value is its length field.
            0
        } else if t.lvt < 5 {
            t.lvt as usize
        } else {
            let l = self.byte(head)?;
            head += 1;
            match l {
                254 => {
                    head += 2;
                    u16::from_be_bytes([self.byte(head - 2)?, self.byte(head - 1)?]) as usize
                }
                255 => {
                    head += 4;
                    u32::from_be_bytes([
                        self.byte(head - 4)?,
                        self.byte(head - 3)?,
                        self.byte(head - 2)?,
                        self.byte(head - 1)?,
                    ]) as usize
                }
                l => l as usize,
            }
        };
        let start = self.at + head;
        let content = self
            .b
            .get(start..start.saturating_add(len))
            .ok_or("a value longer than the answer")?;
        self.at = start + len;
        Ok((t.number, t.context, content))
    }

    fn peek_is(&self, number: u8, context: bool, lvt: Option<u8>) -> bool {
        self.tag()
            .is_ok_and(|t| t.number == number && t.context == context && lvt.is_none_or(|l| t.lvt == l))
    }

    fn peek_context(&self, number: u8) -> bool {
        self.tag().is_ok_and(|t| t.number == number && t.context && t.lvt < 6)
    }

    fn peek_opening(&self, number: u8) -> bool {
        self.peek_is(number, true, Some(6))
    }

    fn peek_closing(&self, number: u8) -> bool {
        self.peek_is(number, true, Some(7))
    }

    fn opening(&mut self, number: u8) -> Result<(), &'static str> {
        self.expect(number, 6)
    }

    fn closing(&mut self, number: u8) -> Result<(), &'static str> {
        self.expect(number, 7)
    }

    fn expect(&mut self, number: u8, lvt: u8) -> Result<(), &'static str> {
        if !self.peek_is(number, true, Some(lvt)) {
            return Err("an opening or closing tag is missing");
        }
        self.at += self.tag()?.len;
        Ok(())
    }

    fn context_unsigned(&mut self, number: u8) -> Result<u32, &'static str> {
        match self.tagged()? {
            (n, true, c) if n == number => unsigned(c),
            _ => Err("a context tag is missing"),
        }
    }

    fn context_object_id(&mut self, number: u8) -> Result<ObjectId, &'static str> {
        match self.tagged()? {
            (n, true, c) if n == number && c.len() == 4 => Ok(ObjectId(u32::from_be_bytes([c[0], c[1], c[2], c[3]]))),
            _ => Err("an object identifier is missing"),
        }
    }

    fn application(&mut self) -> Option<(u8, &'a [u8])> {
        match self.tagged() {
            Ok((n, false, c)) => Some((n, c)),
            _ => None,
        }
    }

    fn application_enumerated(&mut self) -> Result<u32, &'static str> {
        match self.application() {
            Some((9, c)) => unsigned(c),
            _ => Err("an enumerated value is missing"),
        }
    }

    fn application_unsigned(&mut self) -> Result<u32, &'static str> {
        match self.application() {
            Some((2, c)) => unsigned(c),
            _ => Err("an unsigned value is missing"),
        }
    }

    /// One application-tagged value as a reading.
    fn application_value(&mut self) -> Result<Reading, &'static str> {
        let t = self.tag()?;
        if t.context {
            return Err("a context tag where a value was expected");
        }
        if t.number == 1 {
            self.at += t.len;
            return Ok(Reading::Value(if t.lvt != 0 { 1.0 } else { 0.0 }));
        }
        let (number, _, c) = self.tagged()?;
        Ok(match (number, c.len()) {
            (4, 4) => Reading::Value(f32::from_be_bytes([c[0], c[1], c[2], c[3]]) as f64),
            (5, 8) => Reading::Value(f64::from_be_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])),
            (2 | 9, 1..=4) => Reading::Value(unsigned(c)? as f64),
            (3, 1..=4) => {
                let v = unsigned(c)?;
                let shift = 32 - 8 * c.len() as u32;
                Reading::Value((((v << shift) as i32) >> shift) as f64)
            }
            _ => Reading::NotANumber,
        })
    }
}

fn unsigned(c: &[u8]) -> Result<u32, &'static str> {
    if c.is_empty() || c.len() > 4 {
        return Err("an unsigned value of 1 to 4 bytes was expected");
    }
    Ok(c.iter().fold(0u32, |v, &b| v << 8 | b as u32))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hex;

    fn ai(i: u32) -> ObjectId {
        ObjectId::new(ObjectId::ANALOG_INPUT, i).unwrap()
    }

    /// Frames bacpypes3 0.0.110 encoded, and that a bacpypes3 device
    /// answered on the loopback.
    #[test]
    fn a_request_is_the_bytes_bacpypes3_sends() {
        let mut out = [0u8; 64];
        let n = encode_rpm(7, 5, &[ai(0), ai(1)], &mut out).unwrap();
        assert_eq!(
            out[..n].to_vec(),
            hex("81 0a 00 1c 01 04 00 05 07 0e 0c 00 00 00 00 1e 09 55 1f 0c 00 00 00 01 1e 09 55 1f")
        );
        assert_eq!(out[INVOKE_AT], 7);
        assert_eq!(encode_rpm(1, 5, &[ai(0); 7], &mut out), None, "too small a buffer");
        let mut who = [0u8; 18];
        let n = encode_who_is(1001, &mut who);
        assert_eq!(who[..n].to_vec(), hex("81 0a 00 0e 01 00 10 08 0a 03 e9 1a 03 e9"));
    }

    #[test]
    fn answers_are_read_in_place() {
        let ack = hex("81 0a 00 29 01 00 30 07 0e 0c 00 00 00 00 1e 29 55 4e 44 41 9f 86 0a 4f 1f 0c 00 00 00 01 1e 29 55 4e 44 41 97 fa 4e 4f 1f");
        let apdu = apdu_of(&ack).unwrap();
        let Answer::Ack { invoke, service, data } = parse_answer(apdu).unwrap() else {
            panic!()
        };
        assert_eq!((invoke, service), (7, SERVICE_READ_PROPERTY_MULTIPLE));
        let mut seen = vec![];
        parse_rpm_ack(data, &mut |id, v| seen.push((id.instance(), v))).unwrap();
        assert_eq!(seen.len(), 2);
        assert!(
            matches!(seen[0], (0, Reading::Value(v)) if (v - 19.9405).abs() < 1e-3),
            "{seen:?}"
        );
        assert!(
            matches!(seen[1], (1, Reading::Value(v)) if (v - 18.997) .abs() < 1e-2),
            "{seen:?}"
        );

        // AI 999 unknown: an error in place of its value.
        let data = hex("0c 00 00 03 e7 1e 29 55 5e 91 01 91 1f 5f 1f");
        let mut seen = vec![];
        parse_rpm_ack(&data, &mut |id, v| seen.push((id.instance(), v))).unwrap();
        assert_eq!(seen, vec![(999, Reading::Error { class: 1, code: 31 })]);

        assert_eq!(
            parse_answer(&hex("50 0c 0c 91 01 91 1f")).unwrap(),
            Answer::Error {
                invoke: 12,
                class: 1,
                code: 31
            }
        );
        assert_eq!(
            parse_answer(&hex("71 0a 04")).unwrap(),
            Answer::Abort {
                invoke: 10,
                reason: 4,
                by_server: true
            }
        );
        assert_eq!(
            parse_answer(&hex("60 07 09")).unwrap(),
            Answer::Reject { invoke: 7, reason: 9 }
        );
        assert_eq!(
            parse_answer(&hex("3c 07 00 02 0e")).unwrap(),
            Answer::Segmented { invoke: 7 }
        );

        let i_am = hex("81 0a 00 15 01 00 10 00 c4 02 00 03 e9 22 01 e0 91 03 22 03 e7");
        assert_eq!(
            parse_i_am(apdu_of(&i_am).unwrap()),
            Some(IAm {
                device: 1001,
                max_apdu: 480,
                segmentation: 3,
                vendor: 999
            })
        );
    }

    /// What a server reads and answers, read back by the client side;
    /// the I-Am is the bytes a bacpypes3 device sent.
    #[test]
    fn a_server_reads_requests_and_its_answers_read_back() {
        let mut req = [0u8; 64];
        let n = encode_rpm(9, 3, &[ai(0), ai(5)], &mut req).unwrap();
        let Request::Confirmed(c) = parse_request(apdu_of(&req[..n]).unwrap()).unwrap() else {
            panic!()
        };
        assert_eq!(
            (c.invoke, c.max_apdu, c.service, c.segmented_accepted),
            (9, 480, 14, false)
        );
        let mut asked = vec![];
        parse_rpm_request(c.data, &mut |id, p| asked.push((id.instance(), p))).unwrap();
        assert_eq!(asked, vec![(0, 85), (5, 85)]);

        let mut out = [0u8; 128];
        let mut w = AnswerWriter::rpm_ack(&mut out, 9);
        w.value(ai(0), 21.5);
        w.error(ai(5), ERROR_CLASS_OBJECT, ERROR_CODE_UNKNOWN_OBJECT);
        let n = w.finish().unwrap();
        let Answer::Ack { invoke, data, .. } = parse_answer(apdu_of(&out[..n]).unwrap()).unwrap() else {
            panic!()
        };
        assert_eq!(invoke, 9);
        let mut seen = vec![];
        parse_rpm_ack(data, &mut |id, v| seen.push((id.instance(), v))).unwrap();
        assert_eq!(
            seen,
            vec![(0, Reading::Value(21.5)), (5, Reading::Error { class: 1, code: 31 })]
        );
        let mut small = [0u8; 20];
        let mut w = AnswerWriter::rpm_ack(&mut small, 1);
        w.value(ai(0), 1.0);
        assert_eq!(w.finish(), None, "an answer that does not fit is not written");

        let mut e = [0u8; 13];
        let n = encode_error(3, 14, 0, 25, &mut e);
        assert_eq!(
            parse_answer(apdu_of(&e[..n]).unwrap()).unwrap(),
            Answer::Error {
                invoke: 3,
                class: 0,
                code: 25
            }
        );
        let mut a = [0u8; 9];
        let n = encode_refusal(true, 4, 4, &mut a);
        assert_eq!(
            parse_answer(apdu_of(&a[..n]).unwrap()).unwrap(),
            Answer::Abort {
                invoke: 4,
                reason: 4,
                by_server: true
            }
        );
        let mut i_am = [0u8; 21];
        encode_i_am(1001, 480, 999, &mut i_am);
        assert_eq!(
            i_am.to_vec(),
            hex("81 0a 00 15 01 00 10 00 c4 02 00 03 e9 22 01 e0 91 03 22 03 e7")
        );
        let mut who = [0u8; 18];
        let n = encode_who_is(1001, &mut who);
        assert_eq!(
            parse_request(apdu_of(&who[..n]).unwrap()).unwrap(),
            Request::WhoIs(Some((1001, 1001)))
        );
        // ReadProperty AI0 present-value, as bacpypes3 sends it.
        let rp = hex("81 0a 00 11 01 04 00 05 0b 0c 0c 00 00 00 00 19 55");
        let Request::Confirmed(c) = parse_request(apdu_of(&rp).unwrap()).unwrap() else {
            panic!()
        };
        assert_eq!(c.service, SERVICE_READ_PROPERTY);
        assert_eq!(parse_read_property(c.data), Some((ai(0), 85)));
    }

    #[test]
    fn requests_are_sized_to_the_devices_apdu() {
        assert_eq!(max_apdu_code(480), 3);
        assert_eq!(max_apdu_code(1476), 5);
        assert_eq!(max_apdu_code(1000), 3);
        assert_eq!(objects_per_request(480), 22);
        assert_eq!(objects_per_request(50), 2);
        assert!(ObjectId::new(1024, 0).is_none() && ObjectId::new(0, 1 << 22).is_none());
    }

    proptest::proptest! {
        /// Whatever a datagram holds, reading it returns, never panics.
        #[test]
        fn any_datagram_is_read_or_refused(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
            if let Ok(apdu) = apdu_of(&bytes) {
                if let Ok(Answer::Ack { data, .. }) = parse_answer(apdu) {
                    let _ = parse_rpm_ack(data, &mut |_, _| {});
                }
                let _ = parse_i_am(apdu);
                if let Ok(Request::Confirmed(c)) = parse_request(apdu) {
                    let _ = parse_rpm_request(c.data, &mut |_, _| {});
                }
            }
            let _ = parse_rpm_ack(&bytes, &mut |_, _| {});
            let _ = parse_answer(&bytes);
        }
    }
}
