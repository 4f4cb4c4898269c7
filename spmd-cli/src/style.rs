//! Colors and aligned tables. Everything is written with ANSI styles and
//! printed through `anstream`, which drops them when the stream is not a
//! terminal, when `NO_COLOR` is set, or with `--color never`.

use anstyle::{AnsiColor, Color, Style};

pub const HEADER: Style = Style::new().bold();
pub const DIM: Style = Style::new().dimmed();
pub const OK: Style = Style::new().fg_color(Some(Color::Ansi(AnsiColor::Green)));
pub const LOCAL: Style = Style::new().fg_color(Some(Color::Ansi(AnsiColor::Cyan)));
pub const COMM: Style = Style::new().fg_color(Some(Color::Ansi(AnsiColor::Yellow)));
pub const PARTIAL: Style = Style::new().fg_color(Some(Color::Ansi(AnsiColor::Magenta)));
pub const BAD: Style = Style::new()
    .fg_color(Some(Color::Ansi(AnsiColor::Red)))
    .bold();

/// `text` in `style`.
pub fn paint(style: Style, text: impl std::fmt::Display) -> String {
    format!("{style}{text}{style:#}")
}

/// The visible width of a string that may hold ANSI escapes.
pub fn width(s: &str) -> usize {
    let mut n = 0;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ ... final byte in @..~
            if chars.next() == Some('[') {
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
        } else {
            n += 1;
        }
    }
    n
}

/// A table of styled cells, left-aligned, two spaces between columns. The
/// last column is never padded (no trailing spaces).
#[derive(Default)]
pub struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new() -> Table {
        Table::default()
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn render(&self, indent: &str) -> String {
        let cols = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let mut widths = vec![0; cols];
        for r in &self.rows {
            for (i, c) in r.iter().enumerate() {
                widths[i] = widths[i].max(width(c));
            }
        }
        let mut out = String::new();
        for r in &self.rows {
            let mut line = String::from(indent);
            let last = r.iter().rposition(|c| !c.is_empty()).unwrap_or(0);
            for (i, c) in r.iter().enumerate().take(last + 1) {
                line.push_str(c);
                if i < last {
                    line.push_str(&" ".repeat(widths[i] - width(c) + 2));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn width_ignores_escapes() {
        assert_eq!(width(&paint(BAD, "error")), 5);
        assert_eq!(width("│ 0 │"), 5);
    }

    #[test]
    fn tables_align_styled_cells() {
        let mut t = Table::new();
        t.row(vec![paint(HEADER, "a"), "bb".into(), "c".into()]);
        t.row(vec!["aaa".into(), String::new(), "c".into()]);
        t.row(vec!["x".into(), String::new(), String::new()]);
        let plain = t.render("  ");
        let stripped: String = {
            let mut s = String::new();
            let mut skip = false;
            for ch in plain.chars() {
                if ch == '\u{1b}' {
                    skip = true;
                } else if skip {
                    if ch == 'm' {
                        skip = false;
                    }
                } else {
                    s.push(ch);
                }
            }
            s
        };
        assert_eq!(stripped, "  a    bb  c\n  aaa      c\n  x\n");
    }
}
