//! The seven Paddle cases (`benches/common/cases.rs`'s `paddle()`), timed
//! exactly as the Paddle C++ benchmark (`benches/vs_paddle.sh`) times Paddle 3.3.1's C++
//! rules: `warmup` calls of every rule, then `batches` batches of `calls`
//! calls, interleaved across the rules (batch b of every rule, then b + 1),
//! each rule's median ns per call over its batches. Results are dropped
//! inside the loop, as Paddle's `SpmdInfo` is. The forward cases are also
//! timed prepared for their shapes (`SpmdRule::prepare`, into one
//! reused result), as a graph or a search calls a rule; Paddle has no
//! such call, so that column compares our prepared call with its plain one.
//!
//! `cargo run --release --example vs_paddle -- [calls] [batches] [warmup] [--paddle FILE]`
//! prints JSON; with `--paddle FILE` (the Paddle bench's JSON output, taken
//! in the same session) it prints a Markdown table of both medians and the
//! ratio instead. `benches/vs_paddle.sh` runs both sides.

// Shared with the benchmarks; this example times the Paddle cases only.
#[allow(dead_code)]
#[path = "../benches/common/cases.rs"]
mod cases;

use std::hint::black_box;
use std::time::Instant;

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let paddle = match args.iter().position(|a| a == "--paddle") {
        Some(i) if i + 1 < args.len() => {
            let file = args.remove(i + 1);
            args.remove(i);
            let text = std::fs::read_to_string(&file)
                .unwrap_or_else(|e| fail(&format!("cannot read {file}: {e}")));
            Some(
                serde_json::from_str::<serde_json::Value>(&text).unwrap_or_else(|e| {
                    fail(&format!("{file} is not the Paddle bench's JSON: {e}"))
                }),
            )
        }
        Some(_) => fail("--paddle needs a file"),
        None => None,
    };
    let number = |i: usize, default: u64| -> u64 {
        args.get(i).map_or(default, |a| {
            a.parse()
                .unwrap_or_else(|_| fail(&format!("{a:?} is not a count")))
        })
    };
    let (calls, batches, warmup) = (number(0, 20_000), number(1, 30), number(2, 20_000));
    if calls == 0 || batches == 0 {
        fail("calls and batches must be positive");
    }

    let mesh = cases::mesh();
    let cases = cases::paddle();
    for case in &cases {
        case.check();
    }
    // The forward cases also run prepared for their shapes (a graph's or a
    // search's way), answering into one reused result.
    let plains: Vec<Option<spmd_core::Prepared>> = cases.iter().map(|c| c.prepare(&mesh)).collect();
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); cases.len()];
    let mut prepared_times: Vec<Vec<f64>> = vec![Vec::new(); cases.len()];
    for (case, plain) in cases.iter().zip(&plains) {
        run(case, &mesh, warmup);
        if let Some(plain) = plain {
            run_prepared(case, plain, &mesh, warmup);
        }
    }
    for _ in 0..batches {
        for ((case, plain), (t, tp)) in cases
            .iter()
            .zip(&plains)
            .zip(times.iter_mut().zip(&mut prepared_times))
        {
            let start = Instant::now();
            run(case, &mesh, calls);
            t.push(start.elapsed().as_nanos() as f64 / calls as f64);
            if let Some(plain) = plain {
                let start = Instant::now();
                run_prepared(case, plain, &mesh, calls);
                tp.push(start.elapsed().as_nanos() as f64 / calls as f64);
            }
        }
    }
    let medians: Vec<f64> = times.iter_mut().map(|t| median(t)).collect();
    let prepared: Vec<Option<f64>> = prepared_times
        .iter_mut()
        .map(|t| (!t.is_empty()).then(|| median(t)))
        .collect();

    match paddle {
        None => {
            println!(
                "{{\n  \"calls_per_batch\": {calls},\n  \"batches\": {batches},\n  \"warmup_calls\": {warmup},\n  \"rules\": {{"
            );
            for (i, (case, (m, p))) in cases.iter().zip(medians.iter().zip(&prepared)).enumerate() {
                let comma = if i + 1 < cases.len() { "," } else { "" };
                let p = p.map_or(String::new(), |p| {
                    format!(", \"prepared_median_ns\": {p:.1}")
                });
                println!(
                    "    \"{}\": {{\"median_ns\": {m:.1}{p}}}{comma}",
                    key(case.name)
                );
            }
            println!("  }}\n}}");
        }
        Some(p) => {
            println!("| case | Paddle 3.3.1 C++ | spmd | ratio | spmd prepared | ratio |");
            println!("|---|--:|--:|--:|--:|--:|");
            for (case, (m, pm)) in cases.iter().zip(medians.iter().zip(&prepared)) {
                let theirs = p["rules"][key(case.name)]["median_ns"]
                    .as_f64()
                    .unwrap_or_else(|| fail(&format!("no {} in the Paddle JSON", key(case.name))));
                let prepared = pm.map_or("| — | — |".to_string(), |pm| {
                    format!("| {pm:.0} ns | {:.1}× |", theirs / pm)
                });
                println!(
                    "| {} | {:.0} ns | {m:.0} ns | {:.1}× {prepared}",
                    key(case.name),
                    theirs,
                    theirs / m
                );
            }
        }
    }
}

/// `n` calls of `case`, each result dropped.
fn run(case: &cases::Case, mesh: &spmd_core::Mesh, n: u64) {
    case.with_specs(|specs, shapes| {
        for _ in 0..n {
            drop(black_box(case.call(
                black_box(mesh),
                black_box(specs),
                black_box(shapes),
            )));
        }
    });
}

/// `n` calls of `case` by its prepared call, into one reused result.
fn run_prepared(case: &cases::Case, plain: &spmd_core::Prepared, mesh: &spmd_core::Mesh, n: u64) {
    case.with_specs(|specs, _| {
        let mut out = spmd_core::RuleResult::default();
        for _ in 0..n {
            let answered = case.call_prepared(black_box(mesh), black_box(specs), plain, &mut out);
            assert!(answered.is_ok(), "{}: the prepared call answers", case.name);
        }
    });
}

fn median(t: &mut [f64]) -> f64 {
    t.sort_by(f64::total_cmp);
    let n = t.len();
    if n % 2 == 1 {
        t[n / 2]
    } else {
        (t[n / 2 - 1] + t[n / 2]) / 2.0
    }
}

/// The Paddle bench's key of one of our case names.
fn key(name: &str) -> &str {
    name.strip_prefix("paddle_").unwrap_or(name)
}

fn fail(message: &str) -> ! {
    eprintln!("vs_paddle: {message}");
    std::process::exit(2);
}
