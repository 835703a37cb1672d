//! HTML shared by the lab report and the fleet report: the style sheet and
//! escaping.

/// The reports' style sheet (the lab report, the fleet report).
pub const STYLE: &str = "
body{font-family:sans-serif;margin:2em;max-width:1100px;color:#222} table{border-collapse:collapse;font-size:13px;margin:1em 0}
td,th{border:1px solid #bbb;padding:3px 7px;text-align:right} th{background:#eee} td.l{text-align:left}
.na{color:#a00} .note{background:#fff6d6;border-left:4px solid #e0b000;padding:.5em 1em;margin:1em 0}
.model{background:#eef4ff;border-left:4px solid #3070d0;padding:.5em 1em} figure{margin:1em 0}
";

pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}
