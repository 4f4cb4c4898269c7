//! `spmd propagate --html`: the plan page of the exported Llama under
//! `llama_tp_dp.json`, forward and backward.
//!
//! The page is drawn by its own script, so its source holds data and no
//! markers. The first test checks the source; the second renders it in a
//! real headless Chromium and checks the drawn page: a screenshot that is
//! not blank, and one collective marker in the DOM for each communicating
//! step of the plan. The second needs a browser, so it is `#[ignore]`d in
//! the default test command (cargo counts it as ignored) and `.ci/run`,
//! which installs Debian's `chromium`, runs it with `--ignored`.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn hf(name: &str) -> String {
    root()
        .join("spmd-graph/graphs/hf")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

fn spmd(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_spmd"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Writes the page into a fresh directory; returns it with the `--json`
/// report of the same call.
fn llama_page(tag: &str) -> (PathBuf, Value) {
    let dir = std::env::temp_dir().join(format!("spmd-html-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let page = dir.join("plan.html");
    let (graph, plan) = (hf("llama.json"), hf("llama_tp_dp.json"));
    let base = ["propagate", &graph, "--plan", &plan, "--backward"];
    let mut with_html = base.to_vec();
    with_html.extend(["--html", page.to_str().unwrap()]);
    let text = spmd(&with_html);
    assert!(text.contains("plan page written to"), "{text}");
    let mut with_json = base.to_vec();
    with_json.push("--json");
    let report = serde_json::from_str(&spmd(&with_json)).unwrap();
    (page, report)
}

/// The JSON the page draws from.
fn page_data(html: &str) -> Value {
    let tag = "id=\"plan-data\">";
    let start = html.find(tag).unwrap() + tag.len();
    let end = start + html[start..].find("</script>").unwrap();
    serde_json::from_str(&html[start..end]).unwrap()
}

/// The communicating steps of a report (what the page marks).
fn collectives(report: &Value) -> usize {
    report["counts"]
        .as_object()
        .unwrap()
        .values()
        .map(|n| n.as_u64().unwrap() as usize)
        .sum()
}

#[test]
fn the_page_is_self_contained_and_carries_the_report() {
    let (page, report) = llama_page("source");
    let html = std::fs::read_to_string(&page).unwrap();
    // Nothing is fetched: no external scripts, styles or images.
    for needle in ["src=", "href=", "http://", "https://", "@import"] {
        assert!(!html.contains(needle), "{needle}");
    }
    // Markers are drawn, not written: the source has none.
    assert!(!html.contains("class=\"collective\""));
    let data = page_data(&html);
    for side in ["forward", "backward"] {
        let (page, json) = (
            &data[side],
            if side == "forward" {
                &report
            } else {
                &report["backward"]
            },
        );
        for key in [
            "tensors",
            "reshards",
            "counts",
            "bytes_by_kind",
            "total_bytes",
        ] {
            assert_eq!(page[key], json[key], "{side} {key}");
        }
        assert!(!page["ops"].as_array().unwrap().is_empty(), "{side}");
    }
    assert_eq!(collectives(&report), 4);
    assert_eq!(collectives(&report["backward"]), 31);
}

/// The browser: `SPMD_CHROMIUM` if set, else `chromium` on the PATH.
fn chromium() -> String {
    std::env::var("SPMD_CHROMIUM").unwrap_or_else(|_| "chromium".into())
}

fn headless(args: &[&str]) -> Vec<u8> {
    let out = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1400,1800",
        ])
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e} (set SPMD_CHROMIUM)", chromium()));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

#[test]
#[ignore = "needs Chromium; .ci/run installs Debian's `chromium` and runs it with --ignored"]
fn the_page_renders_in_headless_chromium() {
    let (page, report) = llama_page("chromium");
    let url = format!("file://{}", page.display());

    let dom = String::from_utf8(headless(&["--dump-dom", &url])).unwrap();
    let markers = dom.matches("class=\"collective\"").count();
    assert_eq!(
        markers,
        collectives(&report) + collectives(&report["backward"]),
        "markers in the drawn DOM"
    );
    // Every op of both graphs got its row.
    let data = page_data(&std::fs::read_to_string(&page).unwrap());
    let ops = data["forward"]["ops"].as_array().unwrap().len()
        + data["backward"]["ops"].as_array().unwrap().len();
    assert_eq!(dom.matches("<tr>").count(), ops);

    let shot = page.with_file_name("plan.png");
    headless(&[&format!("--screenshot={}", shot.display()), &url]);
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&shot).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!((info.width, info.height), (1400, 1800));
    let channels = info.color_type.samples();
    let pixels = buf[..info.buffer_size()].chunks(channels);
    let (mut inked, mut colours) = (0usize, std::collections::HashSet::new());
    let total = (info.width * info.height) as usize;
    for p in pixels {
        if p[..3] != [255, 255, 255] {
            inked += 1;
        }
        colours.insert([p[0], p[1], p[2]]);
    }
    // Text, tensor chips and coloured mesh grids: far from a blank page.
    assert!(inked * 20 > total, "{inked} of {total} pixels drawn");
    assert!(colours.len() > 50, "{} colours", colours.len());
    std::fs::remove_dir_all(page.parent().unwrap()).ok();
}
