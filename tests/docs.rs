//! Docs that describe code outside Rust stay true to it: the exporter's
//! README names the versions `requirements.txt` pins and the attention
//! implementation the exporter (`spmd.torch.hf`) sets, and the Python
//! package's `torch` extra pins the same versions.

use std::path::PathBuf;

fn read(path: &str) -> String {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn the_exporter_readme_names_the_pinned_versions() {
    let readme = read("tools/torch_export/README.md");
    let pins = read("tools/torch_export/requirements.txt");
    let mut named = 0;
    for line in pins.lines().filter(|l| l.contains("==")) {
        let (package, version) = line.split_once("==").unwrap();
        assert!(
            readme.contains(&format!("{package} {version}")),
            "tools/torch_export/README.md does not say `{package} {version}`, which requirements.txt pins"
        );
        named += 1;
    }
    assert!(named >= 2, "requirements.txt pins {named} packages");
}

#[test]
fn the_exporter_readme_names_the_attention_export_py_sets() {
    let readme = read("tools/torch_export/README.md");
    let script = read("python/spmd/torch/hf.py");
    let set = script
        .lines()
        .find_map(|l| {
            let (_, rest) = l.split_once("_attn_implementation = \"")?;
            rest.split('"').next()
        })
        .expect("spmd.torch.hf sets the attention implementation");
    assert!(
        readme.to_lowercase().contains(&set.to_lowercase()),
        "spmd.torch.hf sets attention `{set}`, which the README does not name"
    );
    if set != "eager" {
        assert!(
            !readme.contains("eager form"),
            "the README says attention is exported in its eager form"
        );
    }
}

#[test]
fn the_python_package_pins_what_the_exporter_pins() {
    let pyproject = read("python/pyproject.toml");
    let pins = read("tools/torch_export/requirements.txt");
    let extra = pyproject
        .lines()
        .find_map(|l| l.strip_prefix("torch = ["))
        .expect("python/pyproject.toml has a `torch` extra");
    let mut named = 0;
    for line in pins.lines().filter(|l| l.contains("==")) {
        assert!(
            extra.contains(&format!("\"{line}\"")),
            "python/pyproject.toml's torch extra does not pin `{line}`, which requirements.txt does"
        );
        named += 1;
    }
    assert_eq!(
        extra.matches("==").count(),
        named,
        "the torch extra pins other packages: {extra}"
    );
}
