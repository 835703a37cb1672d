//! Modbus/TCP: the MBAP header (MODBUS Messaging on TCP/IP Implementation
//! Guide v1.0b, 3.1.3) and the reads of holding and input registers,
//! functions 3 and 4, with their exception answers (MODBUS Application
//! Protocol v1.1b3, 6.3, 6.4 and 7).
//!
//! ```text
//! request   tid:u16 proto:u16=0 len:u16=6 unit:u8 | fc start:u16 count:u16
//! answer    tid     0           3+2n      unit    | fc 2n value:u16 * n
//! exception tid     0           3         unit    | fc|0x80 code
//! ```
//!
//! All fields big-endian. Servers differ in what they echo for requests
//! they cannot decode (pymodbus 3.16 answers function byte 0x80 with code
//! 1, not `fc | 0x80`): any function byte with the high bit set is an
//! exception.

/// The port a Modbus/TCP server listens on unless told otherwise.
pub const DEFAULT_PORT: u16 = 502;
/// The most registers one read may ask for (the answer's byte count is
/// one byte: 250 bytes of values).
pub const MAX_REGISTERS: u16 = 125;
/// The MBAP header: transaction, protocol, length and unit.
pub const HEADER_LEN: usize = 7;
/// The largest frame the protocol allows (a PDU is at most 253 bytes).
pub const MAX_FRAME: usize = 260;
/// A read request's whole frame.
pub const READ_REQUEST_LEN: usize = 12;
/// An exception answer's whole frame.
pub const EXCEPTION_LEN: usize = 9;

/// Which registers a read reads, and the function that reads them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Table {
    /// Function 3, read/write registers (set points, most devices' values).
    Holding,
    /// Function 4, read-only registers (measurements).
    Input,
}

impl Table {
    pub fn function(self) -> u8 {
        match self {
            Table::Holding => 3,
            Table::Input => 4,
        }
    }

    pub fn of_function(fc: u8) -> Option<Table> {
        match fc {
            3 => Some(Table::Holding),
            4 => Some(Table::Input),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Table::Holding => "holding",
            Table::Input => "input",
        }
    }
}

/// One read of `count` registers from `start`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Read {
    pub transaction: u16,
    pub unit: u8,
    pub table: Table,
    pub start: u16,
    pub count: u16,
}

impl Read {
    /// The request's frame.
    pub fn encode(&self) -> [u8; READ_REQUEST_LEN] {
        let [t0, t1] = self.transaction.to_be_bytes();
        let [s0, s1] = self.start.to_be_bytes();
        let [c0, c1] = self.count.to_be_bytes();
        [t0, t1, 0, 0, 0, 6, self.unit, self.table.function(), s0, s1, c0, c1]
    }

    /// Puts `transaction` into an encoded request in place.
    pub fn set_transaction(frame: &mut [u8], transaction: u16) {
        frame[..2].copy_from_slice(&transaction.to_be_bytes());
    }
}

/// How much of a buffer's head is one frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Frame {
    /// Not all of it is here yet.
    Partial,
    /// Not Modbus/TCP (a protocol id other than 0, or a length no frame
    /// has): the stream is out of step and cannot be resynchronised.
    Invalid(&'static str),
    /// The first `len` bytes are one frame.
    Complete(usize),
}

/// Finds the frame at the head of `buf`.
pub fn frame(buf: &[u8]) -> Frame {
    if buf.len() < 6 {
        return Frame::Partial;
    }
    if buf[2] != 0 || buf[3] != 0 {
        return Frame::Invalid("protocol id is not 0 (not Modbus/TCP)");
    }
    let len = u16::from_be_bytes([buf[4], buf[5]]) as usize;
    // The unit and at least a function code; at most a PDU of 253 bytes.
    if !(2..=254).contains(&len) {
        return Frame::Invalid("MBAP length outside 2..254");
    }
    if buf.len() < 6 + len {
        Frame::Partial
    } else {
        Frame::Complete(6 + len)
    }
}

/// A frame's transaction id and unit.
pub fn transaction(frame: &[u8]) -> u16 {
    u16::from_be_bytes([frame[0], frame[1]])
}

/// What a server answered to a read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer<'a> {
    Registers { function: u8, values: Registers<'a> },
    Exception { function: u8, code: u8 },
}

/// Register values as they came on the wire, read in place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Registers<'a>(&'a [u8]);

impl<'a> Registers<'a> {
    pub fn len(&self) -> usize {
        self.0.len() / 2
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = u16> + 'a {
        self.0.chunks_exact(2).map(|b| u16::from_be_bytes([b[0], b[1]]))
    }
}

/// Reads a server's answer: one whole frame (see [`frame`]). Returns its
/// transaction id, unit and answer, or why it is not one.
pub fn parse_answer(f: &[u8]) -> Result<(u16, u8, Answer<'_>), &'static str> {
    if f.len() < HEADER_LEN + 1 || f.len() != 6 + u16::from_be_bytes([f[4], f[5]]) as usize {
        return Err("not one whole frame");
    }
    let (tid, unit, function) = (transaction(f), f[6], f[7]);
    if function & 0x80 != 0 {
        if f.len() != EXCEPTION_LEN {
            return Err("an exception answer is 9 bytes");
        }
        return Ok((tid, unit, Answer::Exception { function, code: f[8] }));
    }
    if Table::of_function(function).is_none() {
        return Err("an answer to a function other than 3 or 4");
    }
    let count = *f.get(8).ok_or("no byte count")? as usize;
    if !count.is_multiple_of(2) || f.len() != 9 + count {
        return Err("the byte count does not match the frame");
    }
    Ok((
        tid,
        unit,
        Answer::Registers {
            function,
            values: Registers(&f[9..]),
        },
    ))
}

/// Why a server refuses a request, as the exception it answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub function: u8,
    pub code: u8,
}

/// Reads a client's request: one whole frame (see [`frame`]). A read of
/// 1..=125 registers is `Ok`; a request the server must refuse is the
/// exception to answer (1: not a read of registers; 3: a count outside
/// 1..=125 or a frame of the wrong length).
pub fn parse_read(f: &[u8]) -> Result<Read, Refusal> {
    let function = f.get(7).copied().unwrap_or(0);
    let Some(table) = Table::of_function(function) else {
        return Err(Refusal {
            function: function | 0x80,
            code: ILLEGAL_FUNCTION,
        });
    };
    let refuse = Refusal {
        function: function | 0x80,
        code: ILLEGAL_DATA_VALUE,
    };
    if f.len() != READ_REQUEST_LEN {
        return Err(refuse);
    }
    let count = u16::from_be_bytes([f[10], f[11]]);
    if count == 0 || count > MAX_REGISTERS {
        return Err(refuse);
    }
    Ok(Read {
        transaction: transaction(f),
        unit: f[6],
        table,
        start: u16::from_be_bytes([f[8], f[9]]),
        count,
    })
}

/// Writes the answer to `read` with `values` (as many as it asked for)
/// into `out`; returns its length.
pub fn encode_registers(read: &Read, values: impl Iterator<Item = u16>, out: &mut [u8; MAX_FRAME]) -> usize {
    let mut n = 0usize;
    for v in values.take(read.count as usize) {
        out[9 + 2 * n..11 + 2 * n].copy_from_slice(&v.to_be_bytes());
        n += 1;
    }
    let bytes = 2 * n;
    out[..2].copy_from_slice(&read.transaction.to_be_bytes());
    out[2..4].copy_from_slice(&[0, 0]);
    out[4..6].copy_from_slice(&((3 + bytes) as u16).to_be_bytes());
    out[6] = read.unit;
    out[7] = read.table.function();
    out[8] = bytes as u8;
    9 + bytes
}

/// An exception answer's frame.
pub fn encode_exception(transaction: u16, unit: u8, refusal: Refusal) -> [u8; EXCEPTION_LEN] {
    let [t0, t1] = transaction.to_be_bytes();
    [t0, t1, 0, 0, 0, 3, unit, refusal.function | 0x80, refusal.code]
}

pub const ILLEGAL_FUNCTION: u8 = 1;
pub const ILLEGAL_DATA_ADDRESS: u8 = 2;
pub const ILLEGAL_DATA_VALUE: u8 = 3;
pub const SERVER_DEVICE_FAILURE: u8 = 4;
pub const GATEWAY_PATH_UNAVAILABLE: u8 = 0x0A;
pub const GATEWAY_TARGET_FAILED: u8 = 0x0B;

/// The exception codes of the specification (7), by code; others are
/// counted by number.
pub const EXCEPTION_NAMES: [(u8, &str); 9] = [
    (1, "illegal-function"),
    (2, "illegal-data-address"),
    (3, "illegal-data-value"),
    (4, "server-device-failure"),
    (5, "acknowledge"),
    (6, "server-device-busy"),
    (8, "memory-parity-error"),
    (0x0A, "gateway-path-unavailable"),
    (0x0B, "gateway-target-device-failed-to-respond"),
];

/// An exception code's name in the specification, if it has one.
pub fn exception_name(code: u8) -> Option<&'static str> {
    EXCEPTION_NAMES.iter().find(|(c, _)| *c == code).map(|(_, n)| *n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hex;

    /// Frames exchanged with a pymodbus 3.16.1 server (unit 1, holding
    /// register i = i, input registers 2150).
    #[test]
    fn requests_and_answers_match_an_independent_server() {
        let read = Read {
            transaction: 1,
            unit: 1,
            table: Table::Holding,
            start: 0,
            count: 4,
        };
        assert_eq!(read.encode().to_vec(), hex("00 01 00 00 00 06 01 03 00 00 00 04"));
        let a = hex("00 01 00 00 00 0b 01 03 08 00 00 00 01 00 02 00 03");
        assert_eq!(frame(&a), Frame::Complete(a.len()));
        let (tid, unit, answer) = parse_answer(&a).unwrap();
        assert_eq!((tid, unit), (1, 1));
        let Answer::Registers { function, values } = answer else {
            panic!("{answer:?}")
        };
        assert_eq!(function, 3);
        assert_eq!(values.iter().collect::<Vec<_>>(), vec![0, 1, 2, 3]);

        let input = Read {
            transaction: 2,
            unit: 1,
            table: Table::Input,
            start: 10,
            count: 2,
        };
        assert_eq!(input.encode().to_vec(), hex("00 02 00 00 00 06 01 04 00 0a 00 02"));
        let bytes = hex("00 02 00 00 00 07 01 04 04 08 66 08 66");
        let (_, _, a) = parse_answer(&bytes).unwrap();
        assert!(matches!(a, Answer::Registers { values, .. } if values.iter().all(|v| v == 2150)));

        // Past the end of its registers; an undecodable request (pymodbus
        // answers function 0x80); an unknown unit.
        for (bytes, function, code) in [
            ("00 05 00 00 00 03 01 83 02", 0x83, 2),
            ("00 04 00 00 00 03 01 80 01", 0x80, 1),
            ("00 07 00 00 00 03 07 83 04", 0x83, 4),
        ] {
            let f = hex(bytes);
            let (_, _, a) = parse_answer(&f).unwrap();
            assert_eq!(a, Answer::Exception { function, code }, "{bytes}");
        }
    }

    #[test]
    fn frames_split_and_joined_are_found_whole() {
        let a = hex("00 01 00 00 00 0b 01 03 08 00 00 00 01 00 02 00 03");
        for cut in 0..a.len() {
            assert_eq!(frame(&a[..cut]), Frame::Partial, "cut at {cut}");
        }
        let mut two = a.clone();
        two.extend_from_slice(&a);
        assert_eq!(frame(&two), Frame::Complete(a.len()));
        assert!(matches!(frame(&hex("00 01 00 01 00 06 01 03")), Frame::Invalid(_)));
        assert!(matches!(frame(&hex("00 01 00 00 01 00 01 03")), Frame::Invalid(_)));
        assert!(
            parse_answer(&hex("00 01 00 00 00 05 01 03 04 00 00")).is_err(),
            "count beyond the frame"
        );
        assert!(
            parse_answer(&hex("00 01 00 00 00 04 01 10 00 00")).is_err(),
            "a write's answer"
        );
    }

    /// What a server makes of requests, and the answers it encodes.
    #[test]
    fn a_server_reads_requests_and_refuses_what_it_must() {
        let read = Read {
            transaction: 0x1234,
            unit: 3,
            table: Table::Input,
            start: 990,
            count: 125,
        };
        assert_eq!(parse_read(&read.encode()), Ok(read));
        let mut too_many = read.encode();
        too_many[11] = 126;
        assert_eq!(
            parse_read(&too_many),
            Err(Refusal {
                function: 0x84,
                code: ILLEGAL_DATA_VALUE
            })
        );
        let mut write = read.encode();
        write[7] = 6;
        assert_eq!(parse_read(&write).unwrap_err().code, ILLEGAL_FUNCTION);
        assert_eq!(parse_read(&write[..8]).unwrap_err().code, ILLEGAL_FUNCTION);

        let mut out = [0u8; MAX_FRAME];
        let n = encode_registers(&read, (0..).map(|i| i as u16), &mut out);
        assert_eq!(n, 9 + 250);
        assert_eq!(frame(&out[..n]), Frame::Complete(n));
        let (tid, unit, a) = parse_answer(&out[..n]).unwrap();
        assert_eq!((tid, unit), (0x1234, 3));
        let Answer::Registers { values, .. } = a else { panic!() };
        assert_eq!(values.len(), 125);
        assert_eq!(values.iter().last(), Some(124));

        let e = encode_exception(
            7,
            1,
            Refusal {
                function: 3,
                code: ILLEGAL_DATA_ADDRESS,
            },
        );
        assert_eq!(e.to_vec(), hex("00 07 00 00 00 03 01 83 02"));
        assert_eq!(exception_name(2), Some("illegal-data-address"));
        assert_eq!(exception_name(0x40), None);
    }

    proptest::proptest! {
        /// Whatever bytes arrive, framing and parsing return, never panic.
        #[test]
        fn any_bytes_are_parsed_or_refused(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
            if let Frame::Complete(n) = frame(&bytes) {
                let _ = parse_answer(&bytes[..n]);
                let _ = parse_read(&bytes[..n]);
            }
            let _ = parse_answer(&bytes);
            let _ = parse_read(&bytes);
        }
    }
}
