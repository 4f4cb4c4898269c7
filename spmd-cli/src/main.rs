//! The `spmd` binary; its commands come in the next step.

fn main() {
    eprintln!("error: no commands yet");
    std::process::exit(2);
}
