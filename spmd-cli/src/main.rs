//! The `spmd` binary: everything is in the library (`spmd_cli::run`).

fn main() {
    // A bug must still end in one line, never a backtrace.
    std::panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        eprintln!("error: internal error (a bug in spmd, please report it): {msg}");
    }));
    std::process::exit(spmd_cli::run(std::env::args_os()));
}
