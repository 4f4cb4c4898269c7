//! How the tool fails: one line on stderr and an exit status.

use std::fmt;

/// Exit status for bad input (arguments, files, a call the rule rejects).
pub const EXIT_USAGE: i32 = 2;
/// Exit status when conformance cases fail.
pub const EXIT_FAILED: i32 = 1;

/// A failure of one command: the message (one line, printed after
/// `error: `) and the exit status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CliError {
    pub message: String,
    pub code: i32,
}

impl CliError {
    /// Bad input: exit status 2.
    pub fn usage(message: impl Into<String>) -> CliError {
        CliError {
            message: one_line(&message.into()),
            code: EXIT_USAGE,
        }
    }

    /// A check that ran and failed: exit status 1, no message of its own
    /// (the command already printed its report).
    pub fn failed() -> CliError {
        CliError {
            message: String::new(),
            code: EXIT_FAILED,
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<spmd_core::SpmdError> for CliError {
    fn from(e: spmd_core::SpmdError) -> CliError {
        CliError::usage(e.to_string())
    }
}

impl From<crate::parse::SyntaxError> for CliError {
    fn from(e: crate::parse::SyntaxError) -> CliError {
        CliError::usage(e.0)
    }
}

/// Joins the lines of a message so that an error is always one line.
pub fn one_line(s: &str) -> String {
    s.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

pub type Result<T, E = CliError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_one_line() {
        let e = CliError::usage("first\n\n  second  \n");
        assert_eq!(e.message, "first; second");
        assert_eq!(e.code, EXIT_USAGE);
        assert_eq!(CliError::failed().code, EXIT_FAILED);
    }
}
