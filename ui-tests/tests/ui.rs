//! Compile-fail suite for `#[spmd_rule]`: every diagnostic the macro gives, and
//! where it lands. One case per file in `ui-tests/`, named after its diagnostic,
//! with the expected `.stderr` beside it; `ui-tests/pass/` holds cases that
//! must compile. A package of its own, so that trybuild builds only spmd-core
//! for the cases.
//!
//! rustc's wording and spans change between releases and `.stderr` files are
//! compared exactly, so the suite is pinned to the toolchain that recorded them
//! (clap's convention, STYLE.md §3) and is ignored on any other. When the
//! toolchain moves, bump the pin and regenerate every file in one commit:
//! `TRYBUILD=overwrite cargo test -p spmd-ui-tests`, then review the diff.
//!
//! A new case: add `ui-tests/<diagnostic>.rs` and run the suite; trybuild
//! writes the actual output to `ui-tests/wip/<diagnostic>.stderr` (git-ignored) and
//! fails. Read it, then move it next to the case. A single case:
//! `cargo test -p spmd-ui-tests -- ui trybuild=<diagnostic>.rs` (the first `ui` is
//! libtest's filter, which must keep this test).

#[rustversion::attr(
    not(stable(1.95)),
    ignore = "ui .stderr files are recorded with rustc 1.95"
)]
#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("*.rs");
    t.pass("pass/*.rs");
}
