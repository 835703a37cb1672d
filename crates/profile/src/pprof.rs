//! The pprof format (profile.proto, gzipped), which `go tool pprof`,
//! Pyroscope and Parca read: one sample per (thread, stack) with four
//! values, samples, on-CPU ns, steal ns and blocked ns, so a flame graph of
//! steal is `-sample_index=steal_ns`. Messages are declared here with
//! prost's derive (the few fields ontime writes), numbered as in
//! github.com/google/pprof/proto/profile.proto.
use std::collections::HashMap;
use std::io::Write;

use anyhow::{Context, Result};
use prost::Message;

use crate::attribute::{Joined, UNSAMPLED};
use crate::symbols::Symbols;

#[derive(Clone, PartialEq, Message)]
pub struct Profile {
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<Mapping>,
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    #[prost(int64, tag = "12")]
    pub period: i64,
    #[prost(int64, repeated, tag = "13")]
    pub comment: Vec<i64>,
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
}

#[derive(Clone, PartialEq, Message)]
pub struct ValueType {
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

#[derive(Clone, PartialEq, Message)]
pub struct Sample {
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<Label>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Label {
    #[prost(int64, tag = "1")]
    pub key: i64,
    #[prost(int64, tag = "2")]
    pub str: i64,
    #[prost(int64, tag = "3")]
    pub num: i64,
}

#[derive(Clone, PartialEq, Message)]
pub struct Mapping {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(int64, tag = "5")]
    pub filename: i64,
    #[prost(bool, tag = "7")]
    pub has_functions: bool,
}

#[derive(Clone, PartialEq, Message)]
pub struct Location {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Line {
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
}

#[derive(Clone, PartialEq, Message)]
pub struct Function {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(int64, tag = "2")]
    pub name: i64,
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    #[prost(int64, tag = "4")]
    pub filename: i64,
}

/// Strings interned into the table (index 0 is "").
#[derive(Default)]
struct Strings {
    table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Strings {
    fn new() -> Strings {
        let mut s = Strings::default();
        s.id("");
        s
    }
    fn id(&mut self, v: &str) -> i64 {
        if let Some(&i) = self.index.get(v) {
            return i;
        }
        let i = self.table.len() as i64;
        self.table.push(v.to_string());
        self.index.insert(v.to_string(), i);
        i
    }
}

/// Builds the profile: each frame one function and one location (one
/// mapping per module), each charge one sample labelled with its tenant
/// and thread. The tenant and thread are also the stack's two root frames,
/// so a flame graph splits by them.
pub fn build(j: &Joined, syms: &Symbols, start_realtime_ns: u64, period_ns: u64) -> Profile {
    let mut s = Strings::new();
    let sample_type = [
        "samples:count",
        "on_cpu:nanoseconds",
        "steal:nanoseconds",
        "blocked:nanoseconds",
    ]
    .iter()
    .map(|t| {
        let (ty, unit) = t.split_once(':').expect("type:unit");
        ValueType {
            r#type: s.id(ty),
            unit: s.id(unit),
        }
    })
    .collect();
    let mut p = Profile {
        sample_type,
        time_nanos: start_realtime_ns as i64,
        duration_nanos: j.duration_ns as i64,
        period_type: Some(ValueType {
            r#type: s.id("cpu"),
            unit: s.id("nanoseconds"),
        }),
        period: period_ns as i64,
        default_sample_type: 1,
        ..Profile::default()
    };
    let mut modules: HashMap<String, u64> = HashMap::new();
    // Location ids: frame id + 1; the synthetic frames (tenant, thread,
    // [unsampled]) follow the real ones.
    for (i, f) in syms.frames.iter().enumerate() {
        let next = modules.len() as u64 + 1;
        let mapping_id = *modules.entry(f.module.clone()).or_insert(next);
        let id = i as u64 + 1;
        let name = s.id(&f.function);
        let filename = s.id(&f.module);
        p.function.push(Function {
            id,
            name,
            system_name: name,
            filename,
        });
        p.location.push(Location {
            id,
            mapping_id,
            line: vec![Line { function_id: id }],
        });
    }
    let mut modules: Vec<(String, u64)> = modules.into_iter().collect();
    modules.sort_by_key(|m| m.1);
    for (m, id) in modules {
        p.mapping.push(Mapping {
            id,
            filename: s.id(&m),
            has_functions: true,
        });
    }
    let mut synthetic: HashMap<String, u64> = HashMap::new();
    let mut synth = |p: &mut Profile, s: &mut Strings, name: &str| -> u64 {
        if let Some(&id) = synthetic.get(name) {
            return id;
        }
        let id = p.location.len() as u64 + 1;
        let n = s.id(name);
        p.function.push(Function {
            id,
            name: n,
            system_name: n,
            filename: 0,
        });
        p.location.push(Location {
            id,
            mapping_id: 0,
            line: vec![Line { function_id: id }],
        });
        synthetic.insert(name.to_string(), id);
        id
    };
    let (k_tenant, k_thread) = (s.id("tenant"), s.id("thread"));
    let mut keys: Vec<&(u32, u32, u32)> = j.charges.keys().collect();
    keys.sort();
    for key in keys {
        let c = &j.charges[key];
        let (tenant, tid, stack) = *key;
        let tenant_name = j.tenant_names.get(tenant as usize).cloned().unwrap_or_default();
        let thread_name = format!(
            "{} [{tid}]",
            j.thread_names.get(&tid).map(String::as_str).unwrap_or("?")
        );
        let mut loc: Vec<u64> = if stack == UNSAMPLED {
            vec![synth(&mut p, &mut s, "[unsampled]")]
        } else {
            syms.stacks[stack as usize].iter().map(|&f| f as u64 + 1).collect()
        };
        loc.push(synth(&mut p, &mut s, &thread_name));
        loc.push(synth(&mut p, &mut s, &tenant_name));
        let (str_tenant, str_thread) = (s.id(&tenant_name), s.id(&thread_name));
        p.sample.push(Sample {
            location_id: loc,
            value: vec![
                c.samples as i64,
                c.on_cpu_ns as i64,
                c.steal_ns as i64,
                c.blocked_ns as i64,
            ],
            label: vec![
                Label {
                    key: k_tenant,
                    str: str_tenant,
                    num: 0,
                },
                Label {
                    key: k_thread,
                    str: str_thread,
                    num: 0,
                },
            ],
        });
    }
    let note = s.id("ontime profile: steal and blocked time are charged to the stack sampled before a blank interval when the sample after it is in the same function (document 002)");
    p.comment.push(note);
    p.string_table = s.table;
    p
}

/// Writes `p` gzipped to `path`.
/// Whole or not at all: a full disk leaves no 0-byte profile behind.
pub fn write(p: &Profile, path: &std::path::Path) -> Result<()> {
    ontime_core::fsio::write_atomic(path, &gzipped(p)?)
}

/// The profile as pprof reads it: gzipped profile.proto.
pub fn gzipped(p: &Profile) -> Result<Vec<u8>> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&p.encode_to_vec()).context("compressing the profile")?;
    gz.finish().context("compressing the profile")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attribute::Charge;

    /// The profile decodes back, names its four value types, and each
    /// sample's stack ends in its thread and tenant.
    #[test]
    fn a_built_profile_decodes_with_its_values_and_root_frames() {
        let syms = Symbols::by_hand(&["leaf", "caller"], &[&[0, 1]], &[0]);
        let mut j = Joined {
            tenant_names: vec!["db".into()],
            duration_ns: 5,
            ..Joined::default()
        };
        j.thread_names.insert(7, "worker".into());
        j.charges.insert(
            (0, 7, 0),
            Charge {
                samples: 3,
                on_cpu_ns: 300,
                steal_ns: 600,
                blocked_ns: 0,
            },
        );
        let p = build(&j, &syms, 1, 1_000_000);
        let back = Profile::decode(p.encode_to_vec().as_slice()).expect("decodes");
        let s = &back.string_table;
        let types: Vec<&str> = back.sample_type.iter().map(|t| s[t.r#type as usize].as_str()).collect();
        assert_eq!(types, ["samples", "on_cpu", "steal", "blocked"]);
        assert_eq!(back.sample[0].value, [3, 300, 600, 0]);
        let name = |loc: u64| {
            let l = &back.location[loc as usize - 1];
            let f = &back.function[l.line[0].function_id as usize - 1];
            s[f.name as usize].clone()
        };
        let stack: Vec<String> = back.sample[0].location_id.iter().map(|&l| name(l)).collect();
        assert_eq!(stack, ["leaf", "caller", "worker [7]", "db"]);
    }
}
