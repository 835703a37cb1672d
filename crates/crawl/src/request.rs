//! A stream's request in its gateway's protocol, built once and written
//! for each poll with the poll's identity, without allocating: getValues
//! over HTTP ([`crate::http`]) or a Modbus/TCP read of registers.

use crate::http::RequestTemplate;
use ontime_fieldbus::modbus::{self, Table};

#[derive(Clone, Debug)]
pub enum Request {
    Http(RequestTemplate),
    Modbus(ModbusRead),
}

/// One read of consecutive registers; the transaction id is the poll's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModbusRead {
    pub unit: u8,
    pub table: Table,
    pub start: u16,
    pub count: u16,
}

impl ModbusRead {
    /// The read of `registers` (consecutive, 1..=125 of them, checked by
    /// the config) from `unit`.
    pub fn new(unit: u8, table: Table, registers: &[u32]) -> ModbusRead {
        ModbusRead {
            unit,
            table,
            start: registers.first().copied().unwrap_or(0) as u16,
            count: registers.len() as u16,
        }
    }

    fn frame(&self, transaction: u16) -> [u8; modbus::READ_REQUEST_LEN] {
        modbus::Read {
            transaction,
            unit: self.unit,
            table: self.table,
            start: self.start,
            count: self.count,
        }
        .encode()
    }
}

impl Request {
    /// Writes poll `index`'s request, planned at `planned_ns`, into `out`
    /// (whose capacity the caller keeps); `transaction` tells its answer
    /// from a stale one where the protocol carries an id (Modbus).
    pub fn write_into(&self, out: &mut Vec<u8>, index: u64, planned_ns: u64, transaction: u16) {
        match self {
            Request::Http(t) => t.write_into(out, index, planned_ns),
            Request::Modbus(r) => {
                out.clear();
                out.extend_from_slice(&r.frame(transaction));
            }
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Request::Http(t) => t.len(),
            Request::Modbus(_) => modbus::READ_REQUEST_LEN,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
