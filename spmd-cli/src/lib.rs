//! The `spmd` command-line tool (see the crate README for a session).
//!
//! `main.rs` only calls [`run`]. Each command lives in [`cmd`] and returns
//! the text to print; parsing of the compact syntax is in [`parse`], the
//! reshard classification in [`reshard`], the block arithmetic of `show` in
//! [`layout`].

use std::io::Write as _;

use clap::error::ErrorKind;
use clap::{CommandFactory as _, Parser as _};

pub mod call;
pub mod cli;
pub mod cmd;
pub mod error;
pub mod graph_input;
pub mod html;
pub mod layout;
pub mod parse;
pub mod report;
/// The reshard classification, shared with the graph crate.
pub use spmd_graph::steps as reshard;
pub mod shapes;
pub mod style;
pub mod trace;

use cli::{Cli, ColorWhen, Command};
use error::{CliError, EXIT_USAGE, one_line};

/// What a command prints, and whether it fails after printing.
#[derive(Debug)]
pub struct Output {
    pub text: String,
    pub fail: Option<CliError>,
}

impl Output {
    pub fn ok(text: String) -> Output {
        Output { text, fail: None }
    }
}

/// Runs one command; the result is the process's exit status.
pub fn run<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(e) => {
            let sub = args
                .get(1)
                .and_then(|a| a.to_str())
                .filter(|a| !a.starts_with('-'));
            // The command line did not parse, so `--json` is looked for as
            // written: a script that asked for JSON still gets JSON.
            let json = args.iter().any(|a| a == "--json");
            return clap_error(e, sub, json);
        }
    };
    match cli.color {
        ColorWhen::Always => anstream::ColorChoice::Always.write_global(),
        ColorWhen::Never => anstream::ColorChoice::Never.write_global(),
        ColorWhen::Auto => {}
    }
    let result = match &cli.command {
        Command::Infer(a) => cmd::infer::infer(a),
        Command::Einsum(a) => cmd::infer::einsum(a),
        Command::Explain(a) => cmd::explain::explain(a),
        Command::Show(a) => cmd::show::show(a),
        Command::Conformance(a) => cmd::conformance::conformance(a),
        Command::Ops(a) => cmd::ops::ops(a),
        Command::Propagate(a) => cmd::propagate::propagate(a),
        Command::Autoshard(a) => cmd::autoshard::autoshard(a),
        Command::Check(a) => cmd::check::check(a),
    };
    let (text, fail) = match result {
        Ok(o) => (o.text, o.fail),
        Err(e) if cli.command.wants_json() => (error_json(&e.message, e.code), Some(e)),
        Err(e) => (String::new(), Some(e)),
    };
    let mut out = anstream::stdout().lock();
    // A closed pipe (`spmd ops | head -1`) is not an error worth a message.
    let _ = out.write_all(text.as_bytes()).and_then(|_| out.flush());
    match fail {
        None => 0,
        Some(e) => {
            if !e.message.is_empty() {
                print_error(&e.message);
            }
            e.code
        }
    }
}

fn print_error(message: &str) {
    let mut err = anstream::stderr().lock();
    let _ = writeln!(
        err,
        "{}error:{} {}",
        style::BAD.render(),
        style::BAD.render_reset(),
        one_line(message)
    );
}

/// An error under `--json`, on stdout (docs/json.md): `{"schema_version",
/// "error": {"message", "exit_code"}}`. The one-line message still goes to
/// stderr for whoever watches the terminal.
fn error_json(message: &str, code: i32) -> String {
    let v = serde_json::json!({
        "schema_version": spmd_graph::report::SCHEMA_VERSION,
        "error": { "message": one_line(message), "exit_code": code },
    });
    format!("{}\n", report::to_json(&v))
}

/// Help and version print as clap renders them; argument errors become one
/// `error: ...` line (with clap's tip folded in) and exit status 2, and
/// under `--json` also the JSON error on stdout.
fn clap_error(e: clap::Error, sub: Option<&str>, json: bool) -> i32 {
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            0
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            EXIT_USAGE
        }
        _ => {
            let rendered = e.render().to_string();
            let mut parts = Vec::new();
            for line in rendered.lines() {
                let line = line.trim();
                if line.is_empty()
                    || line.starts_with("Usage:")
                    || line.starts_with("For more information")
                {
                    continue;
                }
                parts.push(line.strip_prefix("error: ").unwrap_or(line).to_string());
            }
            let cmd = match sub {
                Some(c) if Cli::command().find_subcommand(c).is_some() => {
                    format!("spmd {c} --help")
                }
                _ => "spmd --help".into(),
            };
            let mut msg = String::new();
            for p in parts {
                if !msg.is_empty() {
                    msg.push_str(if msg.ends_with(':') { " " } else { "; " });
                }
                msg.push_str(&p);
            }
            let msg = format!("{msg} (see `{cmd}`)");
            if json {
                let mut out = anstream::stdout().lock();
                let _ = out.write_all(error_json(&msg, EXIT_USAGE).as_bytes());
            }
            print_error(&msg);
            EXIT_USAGE
        }
    }
}
