//! The deviations list (`DEVIATIONS.md`): cases whose answer deliberately
//! differs from the vector's, each with its reason.

use std::collections::BTreeMap;

/// The table of a deviations file (the project's `DEVIATIONS.md` format):
/// every table row whose first cell is a case id (backticks allowed), with the
/// reason from its last cell. An error names the line of a row without a
/// reason or of an id listed twice.
pub fn parse_deviations(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if !line.starts_with('|') {
            continue;
        }
        let cells: Vec<&str> = line
            .trim_matches('|')
            .split('|')
            .map(|c| c.trim().trim_matches('`').trim())
            .collect();
        let id = cells[0];
        if id.is_empty() || id == "case" || id.starts_with('-') || id.starts_with(':') {
            continue;
        }
        let reason = cells.last().copied().unwrap_or_default();
        if cells.len() < 2 || reason.is_empty() {
            return Err(format!(
                "line {}: a deviation needs a reason: {line}",
                n + 1
            ));
        }
        if out.insert(id.to_string(), reason.to_string()).is_some() {
            return Err(format!("line {}: {id} is listed twice", n + 1));
        }
    }
    Ok(out)
}
