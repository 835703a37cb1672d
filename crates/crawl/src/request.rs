//! A stream's request in its gateway's protocol, built once and written
//! for each poll with the poll's identity, without allocating: getValues
//! over HTTP ([`crate::http`]), a Modbus/TCP read of registers, or a
//! BACnet/IP ReadPropertyMultiple of present values.

use crate::http::RequestTemplate;
use ontime_fieldbus::bacnet::{self, ObjectId};
use ontime_fieldbus::modbus::{self, Table};

#[derive(Clone, Debug)]
pub enum Request {
    Http(RequestTemplate),
    Modbus(ModbusRead),
    Bacnet(BacnetRead),
}

/// A ReadPropertyMultiple of the present value of some objects, encoded
/// once; the invoke id is the poll's.
#[derive(Clone, Debug)]
pub struct BacnetRead {
    pub frame: Vec<u8>,
    /// How many objects it reads.
    pub objects: usize,
}

impl BacnetRead {
    /// The read of `instances` of `object_type`, accepting answers of up
    /// to `max_apdu` bytes, unsegmented.
    pub fn new(object_type: u16, instances: &[u32], max_apdu: u16) -> BacnetRead {
        let ids: Vec<ObjectId> = instances
            .iter()
            .filter_map(|&i| ObjectId::new(object_type, i))
            .collect();
        let mut frame = vec![0u8; bacnet::RPM_HEADER_LEN + bacnet::RPM_OBJECT_LEN * ids.len()];
        // Sized exactly above; the config refuses instances past 22 bits.
        let n = bacnet::encode_rpm(0, bacnet::max_apdu_code(max_apdu), &ids, &mut frame).unwrap_or(0);
        frame.truncate(n);
        BacnetRead {
            frame,
            objects: ids.len(),
        }
    }
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
            Request::Bacnet(r) => {
                out.clear();
                out.extend_from_slice(&r.frame);
                out[bacnet::INVOKE_AT] = transaction as u8;
            }
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Request::Http(t) => t.len(),
            Request::Modbus(_) => modbus::READ_REQUEST_LEN,
            Request::Bacnet(r) => r.frame.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
