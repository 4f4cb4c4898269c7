//! `spmd show`: a picture of a tensor's layout, like
//! `jax.debug.visualize_array_sharding`: a grid of the tensor's blocks (the
//! last two dims), each labelled with the devices that hold it, as colored
//! terminal cells and optionally as an SVG file.

use std::fmt::Write as _;

use anstyle::{Ansi256Color, Color, Style};
use serde_json::{Value, json};
use spmd_core::json::Expect;
use spmd_core::{DistAttr, Mesh};

use crate::Output;
use crate::cli::ShowArgs;
use crate::error::{CliError, Result};
use crate::layout::{DimSplit, Layout, block_label, coords};
use crate::parse::{self, shape_text};
use crate::style::{DIM, HEADER, PARTIAL, paint};

/// Pastel xterm-256 colors (readable with black text).
const PALETTE: [u8; 16] = [
    153, 217, 151, 223, 183, 159, 229, 181, 195, 225, 193, 189, 216, 152, 187, 218,
];
/// At most this many grids for the leading dims of a tensor of rank > 2.
const MAX_GRIDS: usize = 8;
/// Cell labels longer than this fall back to a device list plus `(P)`.
const LABEL_LIMIT: usize = 24;

/// `#rrggbb` of an xterm-256 color of the 6x6x6 cube.
fn xterm_hex(i: u8) -> String {
    let i = i.saturating_sub(16);
    let level = |v: u8| if v == 0 { 0 } else { 55 + 40 * v as u32 };
    format!(
        "#{:02x}{:02x}{:02x}",
        level(i / 36),
        level((i / 6) % 6),
        level(i % 6)
    )
}

fn color_of(devices: &[usize]) -> u8 {
    PALETTE[devices.iter().min().copied().unwrap_or(0) % PALETTE.len()]
}

/// One grid to draw: the blocks of the last (up to) two dims, for one block
/// of the leading dims.
struct Grid {
    title: Option<String>,
    /// Row and column splits (a 1-D tensor has one row, a scalar one cell).
    rows: Option<DimSplit>,
    cols: Option<DimSplit>,
    /// `cells[r][c]` = (label, devices).
    cells: Vec<Vec<(String, Vec<usize>)>>,
}

fn grids(l: &Layout) -> (Vec<Grid>, usize) {
    let rank = l.dims.len();
    let lead = rank.saturating_sub(2);
    let (rows, cols) = match rank {
        0 => (None, None),
        1 => (None, Some(l.dims[0].clone())),
        _ => (
            Some(l.dims[rank - 2].clone()),
            Some(l.dims[rank - 1].clone()),
        ),
    };
    let lead_blocks: Vec<usize> = l.dims[..lead].iter().map(DimSplit::blocks).collect();
    let total: usize = lead_blocks.iter().product();
    let mut out = Vec::new();
    for k in 0..total.min(MAX_GRIDS) {
        let lead_idx = coords(&lead_blocks, k);
        let title = (lead > 0).then(|| {
            let parts: Vec<String> = lead_idx
                .iter()
                .enumerate()
                .map(|(d, &b)| {
                    let (s, e) = l.dims[d].bounds[b];
                    format!("dim {d} [{s}:{e}]")
                })
                .collect();
            parts.join(", ")
        });
        let nr = rows.as_ref().map_or(1, DimSplit::blocks);
        let nc = cols.as_ref().map_or(1, DimSplit::blocks);
        let mut cells = Vec::new();
        for r in 0..nr {
            let mut line = Vec::new();
            for c in 0..nc {
                let mut block = lead_idx.clone();
                if rank >= 2 {
                    block.push(r);
                }
                if rank >= 1 {
                    block.push(c);
                }
                let holders = l.holders(&block);
                let label = block_label(&holders, &l.partial, LABEL_LIMIT);
                let devices: Vec<usize> = holders.into_iter().flatten().collect();
                line.push((label, devices));
            }
            cells.push(line);
        }
        out.push(Grid {
            title,
            rows: rows.clone(),
            cols: cols.clone(),
            cells,
        });
    }
    (out, total)
}

fn describe_dim(d: usize, s: &DimSplit, mesh: &[usize]) -> String {
    if s.mesh_dims.is_empty() {
        return format!("dim {d} ({}): replicated", s.extent);
    }
    let over: Vec<String> = s
        .mesh_dims
        .iter()
        .map(|&m| format!("{m} (size {})", mesh[m as usize]))
        .collect();
    let len = s.bounds[0].1 - s.bounds[0].0;
    let blocks = if s.even() {
        format!("{} blocks of {len}", s.blocks())
    } else {
        format!("{} uneven blocks (at most {len})", s.blocks())
    };
    let what = if over.len() == 1 {
        format!("mesh dim {}", over[0])
    } else {
        format!(
            "mesh dims {} (co-sharded, major first)",
            over.join(" then ")
        )
    };
    format!("dim {d} ({}): split over {what} into {blocks}", s.extent)
}

fn range(s: &DimSplit, i: usize) -> String {
    let (a, b) = s.bounds[i];
    format!("{a}:{b}")
}

fn center(text: &str, w: usize) -> String {
    let n = text.chars().count();
    let left = (w.saturating_sub(n)) / 2;
    let right = w.saturating_sub(n + left);
    format!("{}{text}{}", " ".repeat(left), " ".repeat(right))
}

fn render_grid(g: &Grid) -> String {
    let label_w = g
        .cells
        .iter()
        .flatten()
        .map(|(l, _)| l.chars().count())
        .max()
        .unwrap_or(1);
    let col_w = g
        .cols
        .as_ref()
        .map(|c| {
            (0..c.blocks())
                .map(|i| range(c, i).len())
                .max()
                .unwrap_or(0)
        })
        .unwrap_or(0);
    let w = label_w.max(col_w).max(3) + 4;
    let row_w = g
        .rows
        .as_ref()
        .map(|r| {
            (0..r.blocks())
                .map(|i| range(r, i).len())
                .max()
                .unwrap_or(0)
        })
        .unwrap_or(0);
    let margin = if row_w > 0 { row_w + 1 } else { 0 };
    let nc = g.cells.first().map_or(1, Vec::len);
    let nr = g.cells.len();
    let height = if nr <= 2 { 3 } else { 1 };
    let mut s = String::new();
    if let Some(t) = &g.title {
        let _ = writeln!(s, "{}", paint(HEADER, t));
    }
    if let Some(c) = &g.cols {
        let mut head = " ".repeat(margin + 1);
        for i in 0..nc {
            head.push_str(&center(&range(c, i), w));
            head.push(' ');
        }
        let _ = writeln!(s, "{}", paint(DIM, head.trim_end()));
    }
    let hline = |l: char, m: char, r: char| {
        let mut line = " ".repeat(margin);
        line.push(l);
        for i in 0..nc {
            line.push_str(&"─".repeat(w));
            line.push(if i + 1 == nc { r } else { m });
        }
        line
    };
    let _ = writeln!(s, "{}", hline('┌', '┬', '┐'));
    for (r, row) in g.cells.iter().enumerate() {
        for h in 0..height {
            let mut line = String::new();
            if let Some(rows) = &g.rows {
                let lbl = if h == height / 2 {
                    range(rows, r)
                } else {
                    String::new()
                };
                line.push_str(&paint(DIM, format!("{lbl:>row_w$} ")));
            }
            line.push('│');
            for (label, devices) in row {
                let style = Style::new()
                    .bg_color(Some(Color::Ansi256(Ansi256Color(color_of(devices)))))
                    .fg_color(Some(Color::Ansi256(Ansi256Color(16))));
                let text = if h == height / 2 {
                    center(label, w)
                } else {
                    " ".repeat(w)
                };
                line.push_str(&paint(style, text));
                line.push('│');
            }
            let _ = writeln!(s, "{line}");
        }
        if r + 1 < nr {
            let _ = writeln!(s, "{}", hline('├', '┼', '┤'));
        }
    }
    let _ = writeln!(s, "{}", hline('└', '┴', '┘'));
    s
}

fn partial_legend(l: &Layout) -> Option<String> {
    if l.partial.is_empty() {
        return None;
    }
    let parts: Vec<String> = l
        .partial
        .iter()
        .map(|(m, r)| format!("{r} over mesh dim {m}"))
        .collect();
    let block = vec![0; l.dims.len()];
    let group = l.holders(&block).into_iter().next().unwrap_or_default();
    let example = block_label(std::slice::from_ref(&group), &l.partial, usize::MAX);
    let ids: Vec<String> = group.iter().map(|d| d.to_string()).collect();
    Some(format!(
        "partial {}: a block's devices that differ only along {} hold contributions, not copies ({example} = the {} of the values of devices {}); groups separated by spaces are copies",
        parts.join(", "),
        if l.partial.len() == 1 {
            "that mesh dim"
        } else {
            "those mesh dims"
        },
        if l.partial.iter().all(|(_, r)| *r == l.partial[0].1) {
            l.partial[0].1.paddle_name().to_lowercase()
        } else {
            "reductions".into()
        },
        ids.join(", ")
    ))
}

/// Splits text into lines of at most `n` characters at spaces.
fn wrap(text: &str, n: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split(' ') {
        if !line.is_empty() && line.len() + 1 + word.len() > n {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

pub fn show(args: &ShowArgs) -> Result<Output> {
    let mesh = parse::mesh(&args.mesh).map_err(|e| CliError::usage(format!("--mesh: {e}")))?;
    let t = parse::tensor(&args.tensor)
        .map_err(|e| CliError::usage(format!("tensor `{}`: {e}", args.tensor)))?;
    t.check(&mesh)
        .map_err(|e| CliError::usage(format!("tensor `{}`: {e}", args.tensor)))?;
    let attr = t.attr();
    let Some((l, grids, total)) = drawable(&mesh, &t.shape, &attr) else {
        return Err(CliError::usage(format!(
            "mesh {mesh} has {} devices; `show` draws at most {MAX_DRAWN}",
            mesh.size()
        )));
    };

    if let Some(path) = &args.svg {
        std::fs::write(path, svg(&l, &t.shape, &attr, &mesh, &grids, total))
            .map_err(|e| CliError::usage(format!("cannot write {path}: {e}")))?;
    }
    if args.json {
        let devices: Vec<Value> = (0..l.devices())
            .map(|id| {
                let block = l.block_of_device(id);
                let bounds: Vec<[usize; 2]> = block
                    .iter()
                    .zip(&l.dims)
                    .map(|(&b, d)| [d.bounds[b].0, d.bounds[b].1])
                    .collect();
                json!({"device": id, "coords": coords(&l.mesh, id), "block": bounds, "local_shape": l.local_shape(id)})
            })
            .collect();
        let dims: Vec<Value> = l
            .dims
            .iter()
            .map(|d| json!({"extent": d.extent, "mesh_dims": d.mesh_dims, "blocks": d.bounds}))
            .collect();
        let partial: Vec<Value> = l
            .partial
            .iter()
            .map(|(m, r)| json!({"mesh_dim": m, "reduce": r}))
            .collect();
        let v = json!({
            "mesh_shape": mesh.shape(),
            "shape": t.shape,
            "attr": Expect::from_attr(&attr),
            "dims": dims,
            "partial": partial,
            "devices": devices,
            "svg": args.svg,
        });
        return Ok(Output::ok(format!("{}\n", crate::report::to_json(&v))));
    }

    let mut s = picture(&l, &t.shape, &attr, &mesh, &grids, total);
    if let Some(path) = &args.svg {
        let _ = writeln!(s, "\nwrote {path}");
    }
    Ok(Output::ok(s))
}

/// The terminal picture of `attr` (valid on `mesh` for `shape`), what
/// `spmd show` prints; `None` past 4096 devices.
pub fn picture_of(mesh: &Mesh, shape: &[usize], attr: &DistAttr) -> Option<String> {
    let (l, grids, total) = drawable(mesh, shape, attr)?;
    Some(picture(&l, shape, attr, mesh, &grids, total))
}

/// The layout and its grids, when the mesh is small enough to draw.
fn drawable(mesh: &Mesh, shape: &[usize], attr: &DistAttr) -> Option<(Layout, Vec<Grid>, usize)> {
    let l = Layout::new(mesh, shape, attr);
    if l.devices() > MAX_DRAWN {
        return None;
    }
    let (grids, total) = grids(&l);
    Some((l, grids, total))
}

/// The most devices `show` draws.
const MAX_DRAWN: usize = 4096;

/// The text of the picture: the layout in words, then the grids.
fn picture(
    l: &Layout,
    shape: &[usize],
    attr: &DistAttr,
    mesh: &Mesh,
    grids: &[Grid],
    total: usize,
) -> String {
    let mut s = format!(
        "{} {} on mesh {} ({})\n",
        paint(HEADER, format!("tensor {}", shape_text(shape))),
        attr,
        mesh,
        crate::report::devices(mesh.size())
    );
    for (d, split) in l.dims.iter().enumerate() {
        let _ = writeln!(s, "{}", describe_dim(d, split, &l.mesh));
    }
    let local = shape_text(&l.local_shape(0));
    let even = l.dims.iter().all(DimSplit::even);
    let _ = writeln!(
        s,
        "local block: {}{local} per device; device ids are row-major over the mesh",
        if even { "" } else { "at most " }
    );
    if shape.len() > 2 {
        let _ = writeln!(
            s,
            "the grids show dims {} and {}, one grid per block of the leading dims",
            shape.len() - 2,
            shape.len() - 1
        );
    }
    s.push('\n');
    for (i, g) in grids.iter().enumerate() {
        if i > 0 {
            s.push('\n');
        }
        s.push_str(&render_grid(g));
    }
    if total > grids.len() {
        let _ = writeln!(
            s,
            "\n... and {} more grids (one per block of the leading dims)",
            total - grids.len()
        );
    }
    if let Some(p) = partial_legend(l) {
        let _ = writeln!(s, "\n{}", paint(PARTIAL, p));
    }
    s
}

fn xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The picture of `attr` (valid on `mesh` for `shape`) as an SVG document,
/// what `--svg` writes; `None` past 4096 devices.
pub fn svg_of(mesh: &Mesh, shape: &[usize], attr: &DistAttr) -> Option<String> {
    let (l, grids, total) = drawable(mesh, shape, attr)?;
    Some(svg(&l, shape, attr, mesh, &grids, total))
}

/// The same picture as an SVG document: block sizes proportional to their
/// extents.
fn svg(
    l: &Layout,
    shape: &[usize],
    attr: &DistAttr,
    mesh: &Mesh,
    grids: &[Grid],
    total: usize,
) -> String {
    let (attr, mesh) = (&attr.to_string(), &mesh.to_string());
    const W: f64 = 480.0;
    const LEFT: f64 = 70.0;
    const MIN: f64 = 14.0;
    let rank = shape.len();
    let grid_h = match rank {
        0 | 1 => 60.0,
        _ => {
            let (r, c) = (shape[rank - 2].max(1) as f64, shape[rank - 1].max(1) as f64);
            (W * r / c).clamp(80.0, 480.0)
        }
    };
    let sizes = |split: Option<&DimSplit>, total_px: f64| -> Vec<f64> {
        match split {
            None => vec![total_px],
            Some(s) => s
                .bounds
                .iter()
                .map(|&(a, b)| ((b - a) as f64 / s.extent.max(1) as f64 * total_px).max(MIN))
                .collect(),
        }
    };
    let mut body = String::new();
    let mut y = 58.0;
    let mut width: f64 = LEFT + W + 20.0;
    for g in grids {
        if let Some(t) = &g.title {
            let _ = writeln!(
                body,
                r#"<text x="{LEFT}" y="{:.1}" font-weight="bold">{}</text>"#,
                y,
                xml(t)
            );
            y += 18.0;
        }
        let ws = sizes(g.cols.as_ref(), W);
        let hs = sizes(g.rows.as_ref(), grid_h);
        width = width.max(LEFT + ws.iter().sum::<f64>() + 20.0);
        // Column ranges.
        if let Some(c) = &g.cols {
            let mut x = LEFT;
            for (i, w) in ws.iter().enumerate() {
                let _ = writeln!(
                    body,
                    r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" fill="#666">{}</text>"##,
                    x + w / 2.0,
                    y + 10.0,
                    range(c, i)
                );
                x += w;
            }
            y += 16.0;
        }
        let mut yy = y;
        for (r, row) in g.cells.iter().enumerate() {
            let h = hs[r];
            if let Some(rows) = &g.rows {
                let _ = writeln!(
                    body,
                    r##"<text x="{:.1}" y="{:.1}" text-anchor="end" dominant-baseline="middle" fill="#666">{}</text>"##,
                    LEFT - 6.0,
                    yy + h / 2.0,
                    range(rows, r)
                );
            }
            let mut x = LEFT;
            for (c, (label, devices)) in row.iter().enumerate() {
                let w = ws[c];
                let _ = writeln!(
                    body,
                    r##"<rect x="{x:.1}" y="{yy:.1}" width="{w:.1}" height="{h:.1}" fill="{}" stroke="#333"/>"##,
                    xterm_hex(color_of(devices))
                );
                if !l.partial.is_empty() {
                    let _ = writeln!(
                        body,
                        r##"<rect x="{x:.1}" y="{yy:.1}" width="{w:.1}" height="{h:.1}" fill="url(#partial)" stroke="#333"/>"##
                    );
                }
                let _ = writeln!(
                    body,
                    r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" dominant-baseline="middle">{}</text>"#,
                    x + w / 2.0,
                    yy + h / 2.0,
                    xml(label)
                );
                x += w;
            }
            yy += h;
        }
        y = yy + 28.0;
    }
    if total > grids.len() {
        let _ = writeln!(
            body,
            r#"<text x="{LEFT}" y="{y:.1}">... and {} more grids (one per block of the leading dims)</text>"#,
            total - grids.len()
        );
        y += 20.0;
    }
    if let Some(p) = partial_legend(l) {
        for line in wrap(&p, 80) {
            let _ = writeln!(
                body,
                r#"<text x="10" y="{y:.1}" font-size="11">{}</text>"#,
                xml(&line)
            );
            y += 15.0;
        }
        width = width.max(10.0 + 80.0 * 6.7);
    }
    let title = format!(
        "tensor {} {} on mesh {} ({})",
        shape_text(shape),
        attr,
        mesh,
        crate::report::devices(l.devices())
    );
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{:.0}" height="{:.0}" font-family="monospace" font-size="12">"#,
        width,
        y + 10.0
    );
    s.push_str(
        r##"<defs><pattern id="partial" width="8" height="8" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><line x1="0" y1="0" x2="0" y2="8" stroke="#000" stroke-opacity="0.25" stroke-width="2"/></pattern></defs>
"##,
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="10" y="22" font-weight="bold" font-size="14">{}</text>"#,
        xml(&title)
    );
    s.push_str(&body);
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xterm_colors() {
        assert_eq!(xterm_hex(16), "#000000");
        assert_eq!(xterm_hex(231), "#ffffff");
        assert_eq!(xterm_hex(153), "#afd7ff");
    }

    #[test]
    fn wrapping() {
        assert_eq!(wrap("aa bb cc", 5), ["aa bb", "cc"]);
        assert_eq!(wrap("toolongword x", 3), ["toolongword", "x"]);
    }

    #[test]
    fn centering() {
        assert_eq!(center("ab", 6), "  ab  ");
        assert_eq!(center("abc", 6), " abc  ");
        assert_eq!(center("toolong", 3), "toolong");
    }
}
