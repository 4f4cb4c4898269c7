//! Calls one benchmark case N times: what `benches/instructions.sh` runs
//! under callgrind to count instructions per call (the difference of two
//! runs, so that start-up costs cancel).
//!
//! `cargo run --release --example calls -- CASE N [into|prepared]`
//! (`--list` names the cases; `into` answers into one reused result,
//! `prepared` by the call prepared for the case's shapes).

#[path = "../benches/common/cases.rs"]
mod cases;

use std::hint::black_box;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--list") {
        for c in cases::all().into_iter().chain(cases::paddle()) {
            println!("{}", c.name);
        }
        println!("{}", cases::PREPARED_MATMUL);
        println!("{}", cases::INLINE_MATMUL);
        return;
    }
    let (Some(name), Some(n)) = (
        args.first(),
        args.get(1).and_then(|n| n.parse::<u64>().ok()),
    ) else {
        eprintln!("usage: calls CASE N (or --list)");
        std::process::exit(2);
    };
    if name == cases::PREPARED_MATMUL {
        // A prepared call answers into a reused result only.
        let mesh = cases::mesh();
        cases::with_prepared_matmul(|call, attrs| {
            let mut out = spmd_core::RuleResult::default();
            for _ in 0..n {
                black_box(call.forward_into(black_box(&mesh), black_box(attrs), &mut out))
                    .expect("the case answers");
            }
        });
        return;
    }
    if name == cases::INLINE_MATMUL {
        // The same prepared call, answered into fixed arrays.
        let mesh = cases::mesh();
        cases::with_prepared_matmul(|call, attrs| {
            let mut out = spmd_core::InlineResult::default();
            for _ in 0..n {
                black_box(call.forward_inline(black_box(&mesh), black_box(attrs), &mut out))
                    .expect("the case answers");
            }
        });
        return;
    }
    let Some(case) = cases::by_name(name) else {
        eprintln!("no case named {name:?}; --list names them");
        std::process::exit(2);
    };
    case.check();
    let mesh = cases::mesh();
    // `into`: answer into one reused result (`SpmdRule::infer_into`), as a
    // search does; `prepared`: the same, by the call prepared for the
    // case's shapes (`SpmdRule::prepare`); by default each call
    // returns its result by value.
    let mode = args.get(2).map(String::as_str);
    if mode == Some("prepared") {
        let Some(plain) = case.prepare(&mesh) else {
            eprintln!(
                "{name} has no prepared call (a backward case, or a rule that does not prepare)"
            );
            std::process::exit(2);
        };
        case.with_specs(|specs, _| {
            let mut out = spmd_core::RuleResult::default();
            let answered = case.call_prepared(&mesh, specs, &plain, &mut out);
            assert!(answered.is_ok(), "{name}: the prepared call answers");
            for _ in 0..n {
                black_box(case.call_prepared(black_box(&mesh), black_box(specs), &plain, &mut out))
                    .expect("the case answers");
            }
        });
        return;
    }
    let into = mode == Some("into");
    case.with_specs(|specs, shapes| {
        if into {
            let mut out = spmd_core::RuleResult::default();
            for _ in 0..n {
                black_box(case.call_into(
                    black_box(&mesh),
                    black_box(specs),
                    black_box(shapes),
                    &mut out,
                ))
                .expect("the case answers");
            }
        } else {
            for _ in 0..n {
                drop(black_box(case.call(
                    black_box(&mesh),
                    black_box(specs),
                    black_box(shapes),
                )));
            }
        }
    });
}
