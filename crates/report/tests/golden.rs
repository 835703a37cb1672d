//! The lab report over a committed results directory (two crawler runs made
//! by `ontime lab run tests/fixtures/golden-lab.toml`) against the report
//! it must give, so a change to the report is seen in review as a change to
//! `tests/golden/report.html`. Set ONTIME_UPDATE_GOLDEN=1 to accept a
//! change on purpose. No root, no lab: results only.

use std::path::Path;

#[test]
fn the_report_over_committed_results_is_the_golden_one() {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let fixture = here.join("tests/fixtures/golden-lab");
    let golden = here.join("tests/golden/report.html");
    let out = tempfile::tempdir().unwrap();
    let w = ontime_report::write(&fixture, Some(out.path())).expect("report");
    assert_eq!(w.runs, 2);
    let html = std::fs::read_to_string(&w.html).unwrap();
    for png in &w.pngs {
        let bytes = std::fs::read(png).unwrap();
        assert!(bytes.starts_with(b"\x89PNG"), "{} is a PNG", png.display());
    }
    if std::env::var_os("ONTIME_UPDATE_GOLDEN").is_some() {
        std::fs::write(&golden, &html).unwrap();
    }
    let want = std::fs::read_to_string(&golden).expect("tests/golden/report.html (ONTIME_UPDATE_GOLDEN=1 writes it)");
    if html != want {
        let first = html
            .lines()
            .zip(want.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(html.lines().count().min(want.lines().count()));
        panic!(
            "the report differs from tests/golden/report.html at line {}:\n got: {}\nwant: {}\n(ONTIME_UPDATE_GOLDEN=1 accepts it)",
            first + 1,
            html.lines().nth(first).unwrap_or("<end>"),
            want.lines().nth(first).unwrap_or("<end>")
        );
    }
}

/// A results directory with no run, or a run record that is not one, is
/// the user's input (the CLI exits 2 for `BadInput`).
#[test]
fn results_that_are_not_results_are_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let e = ontime_report::write(dir.path(), None).unwrap_err();
    assert!(e.downcast_ref::<ontime_core::BadInput>().is_some(), "{e:#}");
    std::fs::create_dir_all(dir.path().join("runs/000-rep1")).unwrap();
    std::fs::write(dir.path().join("runs/000-rep1/run.json"), "{\"complete\": tru").unwrap();
    let e = ontime_report::write(dir.path(), None).unwrap_err();
    assert!(e.downcast_ref::<ontime_core::BadInput>().is_some(), "{e:#}");
    assert!(format!("{e:#}").contains("run.json"), "{e:#}");
}
