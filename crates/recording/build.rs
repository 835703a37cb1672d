//! Generates the Rust side of the layout the BPF programs share with the
//! recording from the C headers in `abi/`, the one definition (ontime-trace
//! compiles its BPF programs against the same files): `event_abi.rs` from
//! `abi/event.h` and `io_event_abi.rs` from `abi/io_event.h`.
//!
//! No clang: a small reader of the plain C the headers keep to (their first
//! comment says which). It reads `enum NAME { MEMBER = N, ... };` into a
//! module of u8 constants, `#define NAME VALUE` into constants of the type
//! the header's rules below give them, and `struct NAME { TYPE field; ...
//! };` into a `#[repr(C)]` struct with a little-endian codec (`from_bytes`,
//! `to_bytes`) and its size. A comment just before an item (or after it on
//! its line) becomes its doc. Anything else it is asked to read stops the
//! build, naming the header and the line.
use std::env;
use std::fmt::Write as _;
use std::path::PathBuf;

/// How one header becomes Rust.
struct Abi {
    header: &'static str,
    out: &'static str,
    enums: &'static [Enum],
    defines: &'static [Define],
    structs: &'static [Struct],
}

/// `enum c { PREFIX_NAME = N, ... };` becomes `pub mod module { pub const
/// NAME: u8 = N; ... }`.
struct Enum {
    c: &'static str,
    module: &'static str,
    prefix: &'static str,
}

/// `#define NAME VALUE` with a name starting with `prefix` becomes `pub
/// const NAME: ty` with `strip` taken off the front of the name. A define
/// with a value that no rule matches stops the build: each constant is
/// given its Rust type here.
struct Define {
    prefix: &'static str,
    strip: &'static str,
    ty: &'static str,
}

/// `struct c { ... };` becomes `pub struct rust`, `pub const size: usize`.
struct Struct {
    c: &'static str,
    rust: &'static str,
    size: &'static str,
    /// `to_bytes(&self)` rather than `to_bytes(self)`.
    by_ref: bool,
}

const ABIS: &[Abi] = &[
    Abi {
        header: "abi/event.h",
        out: "event_abi.rs",
        enums: &[Enum {
            c: "kind",
            module: "kind",
            prefix: "EV_",
        }],
        defines: &[
            Define {
                prefix: "F_",
                strip: "",
                ty: "u8",
            },
            Define {
                prefix: "TASK_",
                strip: "",
                ty: "u32",
            },
        ],
        structs: &[Struct {
            c: "event",
            rust: "Event",
            size: "EVENT_SIZE",
            by_ref: false,
        }],
    },
    Abi {
        header: "abi/io_event.h",
        out: "io_event_abi.rs",
        enums: &[Enum {
            c: "io_kind",
            module: "io_kind",
            prefix: "IO_",
        }],
        defines: &[
            Define {
                prefix: "IO_F_",
                strip: "IO_",
                ty: "u8",
            },
            Define {
                prefix: "IO_NO_GROUP",
                strip: "IO_",
                ty: "u32",
            },
            Define {
                prefix: "IO_LAYER_",
                strip: "IO_",
                ty: "u32",
            },
            // A size, like IO_EVENT_SIZE beside it: the name stays.
            Define {
                prefix: "IO_PATH_MAX",
                strip: "",
                ty: "usize",
            },
        ],
        structs: &[
            Struct {
                c: "io_event",
                rust: "IoEvent",
                size: "IO_EVENT_SIZE",
                by_ref: true,
            },
            Struct {
                c: "dev_counts",
                rust: "DevCounts",
                size: "DEV_COUNTS_SIZE",
                by_ref: false,
            },
            Struct {
                c: "app_counts",
                rust: "AppCounts",
                size: "APP_COUNTS_SIZE",
                by_ref: false,
            },
        ],
    },
];

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR is set by cargo"));
    for abi in ABIS {
        let text = std::fs::read_to_string(abi.header).unwrap_or_else(|e| panic!("cannot read {}: {e}", abi.header));
        std::fs::write(out.join(abi.out), generate(abi, &text))
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", abi.out));
        println!("cargo:rerun-if-changed={}", abi.header);
    }
}

/// A line of C with its comments taken out: the comment just before it
/// (or after it on the same line) is its doc.
struct Line {
    code: String,
    doc: Vec<String>,
}

/// The header's lines of code, whitespace runs made one space. A blank
/// line drops a comment no code followed.
fn lines(text: &str) -> Vec<Line> {
    let mut out = Vec::new();
    let mut doc: Vec<String> = Vec::new();
    let mut in_comment = false;
    for raw in text.lines() {
        let mut code = String::new();
        let mut rest = raw;
        loop {
            if in_comment {
                let Some(end) = rest.find("*/") else {
                    comment(&mut doc, rest);
                    break;
                };
                comment(&mut doc, &rest[..end]);
                rest = &rest[end + 2..];
                in_comment = false;
                continue;
            }
            match (rest.find("/*"), rest.find("//")) {
                (Some(block), line) if line.is_none_or(|l| block < l) => {
                    code.push_str(&rest[..block]);
                    rest = &rest[block + 2..];
                    in_comment = true;
                }
                (_, Some(line)) => {
                    code.push_str(&rest[..line]);
                    comment(&mut doc, &rest[line + 2..]);
                    break;
                }
                _ => {
                    code.push_str(rest);
                    break;
                }
            }
        }
        let code = code.split_whitespace().collect::<Vec<_>>().join(" ");
        if !code.is_empty() {
            out.push(Line {
                code,
                doc: std::mem::take(&mut doc),
            });
        } else if raw.trim().is_empty() {
            doc.clear();
        }
    }
    out
}

/// One line of a comment, without the ` * ` that continues a block comment.
fn comment(doc: &mut Vec<String>, text: &str) {
    let t = text.trim();
    let t = t.strip_prefix('*').map_or(t, str::trim);
    doc.push(t.to_string());
}

/// `///` lines of a doc, blank lines at either end left out; false when
/// there is none.
fn write_doc(s: &mut String, indent: &str, doc: &[String]) -> bool {
    let (Some(first), Some(last)) = (
        doc.iter().position(|l| !l.is_empty()),
        doc.iter().rposition(|l| !l.is_empty()),
    ) else {
        return false;
    };
    for l in &doc[first..=last] {
        if l.is_empty() {
            let _ = writeln!(s, "{indent}///");
        } else {
            let _ = writeln!(s, "{indent}/// {l}");
        }
    }
    true
}

/// The doc of a generated item: the header's comment, then where it is from.
fn write_item_doc(s: &mut String, doc: &[String], from: &str) {
    if write_doc(s, "", doc) {
        s.push_str("///\n");
    }
    let _ = writeln!(s, "/// From `{from}`.");
}

/// The line `open` (`struct io_event {`) and the lines up to its `};`.
fn item<'a>(header: &str, lines: &'a [Line], open: &str) -> (&'a Line, &'a [Line]) {
    let at = lines
        .iter()
        .position(|l| l.code == open)
        .unwrap_or_else(|| panic!("{header}: no line '{open}'"));
    let rest = &lines[at + 1..];
    let len = rest
        .iter()
        .position(|l| l.code.starts_with('}'))
        .unwrap_or_else(|| panic!("{header}: '{open}' is not closed"));
    assert!(
        rest[len].code == "};",
        "{header}: '{open}' ends in '{}', not '}};'",
        rest[len].code
    );
    (&lines[at], &rest[..len])
}

/// A C integer literal (decimal or hex, `u`/`l` suffixes allowed) as
/// Rust writes it, and its value.
fn literal(header: &str, v: &str) -> (String, u64) {
    let lit = v.trim_end_matches(['u', 'U', 'l', 'L']);
    let value = match lit.strip_prefix("0x").or_else(|| lit.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None if lit.len() > 1 && lit.starts_with('0') => {
            panic!("{header}: '{v}' is octal in C; write it in hex or decimal")
        }
        None => lit.parse().ok(),
    };
    let value = value.unwrap_or_else(|| panic!("{header}: '{v}' is not an integer build.rs reads"));
    (lit.to_string(), value)
}

fn generate(abi: &Abi, text: &str) -> String {
    let h = abi.header;
    let lines = lines(text);
    let mut s = format!("// Generated by build.rs from {h}: do not edit.\n");

    for e in abi.enums {
        let (open, members) = item(h, &lines, &format!("enum {} {{", e.c));
        s.push('\n');
        write_item_doc(&mut s, &open.doc, &format!("enum {}` in `{h}", e.c));
        let _ = writeln!(s, "pub mod {} {{", e.module);
        for m in members {
            let code = m.code.trim_end_matches(',');
            let (name, value) = code
                .split_once('=')
                .unwrap_or_else(|| panic!("{h}: '{}' is not 'NAME = N,'", m.code));
            let name = name.trim();
            let name = name
                .strip_prefix(e.prefix)
                .unwrap_or_else(|| panic!("{h}: {name} does not start with {}", e.prefix));
            let value: u8 = value
                .trim()
                .parse()
                .unwrap_or_else(|_| panic!("{h}: '{}': not a u8", m.code));
            write_doc(&mut s, "    ", &m.doc);
            let _ = writeln!(s, "    pub const {name}: u8 = {value};");
        }
        s.push_str("}\n");
    }

    s.push('\n');
    for l in lines.iter().filter(|l| l.code.starts_with("#define ")) {
        let mut w = l.code.split(' ').skip(1);
        let name = w.next().unwrap_or_else(|| panic!("{h}: '{}' has no name", l.code));
        // A header guard: no value, nothing for Rust.
        let Some(value) = w.next() else { continue };
        assert!(w.next().is_none(), "{h}: '{}' is not '#define NAME VALUE'", l.code);
        let rule = abi
            .defines
            .iter()
            .find(|d| name.starts_with(d.prefix))
            .unwrap_or_else(|| panic!("{h}: {name}: build.rs has no rule giving it a Rust type"));
        let rust = name
            .strip_prefix(rule.strip)
            .unwrap_or_else(|| panic!("{h}: {name} does not start with {}", rule.strip));
        let (lit, v) = literal(h, value);
        let max = match rule.ty {
            "u8" => u8::MAX as u64,
            "u32" => u32::MAX as u64,
            _ => u64::MAX,
        };
        assert!(v <= max, "{h}: {name} = {value} does not fit a {}", rule.ty);
        write_doc(&mut s, "", &l.doc);
        let _ = writeln!(s, "pub const {rust}: {} = {lit};", rule.ty);
    }

    for st in abi.structs {
        let (open, body) = item(h, &lines, &format!("struct {} {{", st.c));
        struct Field<'a> {
            name: &'a str,
            /// The scalar type, or None for a byte array.
            scalar: Option<&'static str>,
            offset: usize,
            size: usize,
            doc: &'a [String],
        }
        let mut fields = Vec::new();
        let (mut offset, mut align_max) = (0usize, 1usize);
        for l in body {
            let decl = l
                .code
                .strip_suffix(';')
                .unwrap_or_else(|| panic!("{h}: '{}' is not 'TYPE name;'", l.code));
            let (ty, name) = decl
                .rsplit_once(' ')
                .unwrap_or_else(|| panic!("{h}: '{}' is not 'TYPE name;'", l.code));
            let (scalar, name, size, align) = match name.split_once('[') {
                Some((name, len)) => {
                    let len: usize = len
                        .strip_suffix(']')
                        .and_then(|n| n.parse().ok())
                        .unwrap_or_else(|| panic!("{h}: '{}': an array's length must be a number", l.code));
                    assert!(
                        matches!(ty, "char" | "__u8"),
                        "{h}: '{}': build.rs reads arrays of char or __u8 only",
                        l.code
                    );
                    // derive(Default) covers arrays up to 32 elements.
                    assert!(len <= 32, "{h}: '{}': arrays of at most 32 bytes", l.code);
                    (None, name, len, 1)
                }
                None => {
                    let (rust, size) = match ty {
                        "__u64" => ("u64", 8),
                        "__s64" => ("i64", 8),
                        "__u32" => ("u32", 4),
                        "__s32" => ("i32", 4),
                        "__u16" => ("u16", 2),
                        "__s16" => ("i16", 2),
                        "__u8" => ("u8", 1),
                        "__s8" => ("i8", 1),
                        other => panic!("{h}: field type {other} is not one build.rs knows"),
                    };
                    (Some(rust), name, size, size)
                }
            };
            // Little-endian bytes at these offsets are the on-disk format:
            // no padding may hide between fields.
            assert!(
                offset.is_multiple_of(align),
                "{h}: field {name} of struct {} is not naturally aligned",
                st.c
            );
            align_max = align_max.max(align);
            fields.push(Field {
                name,
                scalar,
                offset,
                size,
                doc: &l.doc,
            });
            offset += size;
        }
        assert!(
            offset.is_multiple_of(align_max),
            "{h}: struct {} would end in padding",
            st.c
        );
        let (rust, size) = (st.rust, st.size);
        s.push('\n');
        write_item_doc(&mut s, &open.doc, &format!("struct {}` in `{h}", st.c));
        s.push_str("#[repr(C)]\n#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]\n");
        let _ = writeln!(s, "pub struct {rust} {{");
        for f in &fields {
            write_doc(&mut s, "    ", f.doc);
            match f.scalar {
                Some(t) => {
                    let _ = writeln!(s, "    pub {}: {t},", f.name);
                }
                None => {
                    let _ = writeln!(s, "    pub {}: [u8; {}],", f.name, f.size);
                }
            }
        }
        s.push_str("}\n\n");
        let _ = writeln!(s, "/// Bytes of one `{rust}`.\npub const {size}: usize = {offset};");
        let _ = writeln!(s, "const _: () = assert!(std::mem::size_of::<{rust}>() == {size});\n");
        let _ = writeln!(s, "impl {rust} {{");
        let _ = writeln!(
            s,
            "    /// Reads one from little-endian bytes (at least `{size}`; None when fewer)."
        );
        let _ = writeln!(s, "    pub fn from_bytes(b: &[u8]) -> Option<{rust}> {{");
        let _ = writeln!(s, "        let b = b.get(..{size})?;\n        Some({rust} {{");
        for f in &fields {
            let (a, z) = (f.offset, f.offset + f.size);
            match f.scalar {
                Some(t) => {
                    let _ = writeln!(
                        s,
                        "            {}: {t}::from_le_bytes(b[{a}..{z}].try_into().ok()?),",
                        f.name
                    );
                }
                None => {
                    let _ = writeln!(s, "            {}: b[{a}..{z}].try_into().ok()?,", f.name);
                }
            }
        }
        s.push_str("        })\n    }\n\n");
        let recv = if st.by_ref { "&self" } else { "self" };
        let _ = writeln!(s, "    /// As little-endian bytes.");
        let _ = writeln!(s, "    pub fn to_bytes({recv}) -> [u8; {size}] {{");
        let _ = writeln!(s, "        let mut out = [0u8; {size}];");
        for f in &fields {
            let (a, z) = (f.offset, f.offset + f.size);
            match f.scalar {
                Some(_) => {
                    let _ = writeln!(
                        s,
                        "        out[{a}..{z}].copy_from_slice(&self.{}.to_le_bytes());",
                        f.name
                    );
                }
                None => {
                    let _ = writeln!(s, "        out[{a}..{z}].copy_from_slice(&self.{});", f.name);
                }
            }
        }
        s.push_str("        out\n    }\n}\n");
    }
    s
}
