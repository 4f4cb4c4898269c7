//! `spmd propagate --html`: the whole plan as one self-contained page.
//!
//! The page carries the report as JSON (the `propagate --json` report, see
//! `docs/json.md`, plus each op's inputs and outputs) and draws it with a
//! short script: the ops in order, each tensor's layout as a grid of the
//! mesh's devices coloured by the block they hold, and a marker for each
//! collective where it happens, with its bytes. Drawing in the browser
//! keeps a 7B model's page a few megabytes, and one data block is the
//! whole contract between the two halves.

use serde_json::{Value, json};
use spmd_graph::{Graph, Propagation, ReshardPlan, report};

/// One graph's part of the page: its report and its ops.
pub fn section(graph: &Graph, prop: &Propagation, plan: &ReshardPlan) -> Value {
    let mut v = report::json(graph, prop, plan);
    let ops: Vec<Value> = graph
        .op_ids()
        .map(|o| {
            let op = graph.op(o);
            let names =
                |ts: &[_]| -> Vec<String> { ts.iter().map(|&t| graph.tensor(t).name.clone()).collect() };
            json!({ "name": op.name, "rule": op.rule, "inputs": names(graph.inputs(o)), "outputs": names(graph.outputs(o)) })
        })
        .collect();
    if let Value::Object(m) = &mut v {
        m.remove("schema_version");
        m.insert("ops".into(), Value::Array(ops));
    }
    v
}

/// The page: `title`, the forward section and, when built, the backward's.
pub fn page(title: &str, forward: Value, backward: Option<Value>) -> String {
    let data = json!({
        "schema_version": report::SCHEMA_VERSION,
        "title": title,
        "forward": forward,
        "backward": backward,
    });
    // Inside <script>, `</` would end the element: JSON may escape `/`.
    let data = serde_json::to_string(&data)
        .unwrap_or_else(|_| "{}".into())
        .replace("</", "<\\/");
    format!(
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>spmd plan: {}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n\
         <main id=\"plan\"><noscript>This page draws the plan with JavaScript.</noscript></main>\n\
         <script type=\"application/json\" id=\"plan-data\">{data}</script>\n\
         <script>{SCRIPT}</script>\n</body>\n</html>\n",
        escape(title)
    )
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const STYLE: &str = r#"
body { font: 13px/1.4 system-ui, sans-serif; margin: 1.5em; color: #1d1d1f; background: #fff; }
h1 { font-size: 18px; margin: 0 0 .3em; } h2 { font-size: 15px; margin: 1.5em 0 .4em; }
.totals { color: #444; margin: .2em 0; }
table { border-collapse: collapse; width: 100%; }
td { border-top: 1px solid #e4e4e7; padding: 4px 6px; vertical-align: top; }
td.idx { color: #999; text-align: right; width: 3em; }
td.op b { font-family: ui-monospace, monospace; } td.op span { color: #666; }
.tensor { display: inline-flex; gap: 6px; align-items: center; margin: 2px 8px 2px 0; padding: 2px 5px;
  border: 1px solid #d4d4d8; border-radius: 4px; background: #fafafa; }
.tensor code { font-size: 12px; } .tensor .layout { color: #555; font-family: ui-monospace, monospace; font-size: 11px; }
.tensor.partial { border-color: #d97706; background: #fff7ed; }
.mesh { display: inline-grid; gap: 1px; }
.mesh i { display: block; width: 9px; height: 9px; }
.collective { display: block; margin: 2px 0; padding: 2px 6px; border-left: 4px solid #dc2626;
  background: #fef2f2; font-family: ui-monospace, monospace; font-size: 11px; }
.collective[data-kind="all_gather"] { border-color: #2563eb; background: #eff6ff; }
.collective[data-kind="all_to_all"] { border-color: #7c3aed; background: #f5f3ff; }
.collective[data-kind="reduce_scatter"] { border-color: #ea580c; background: #fff7ed; }
.collective[data-kind="reorder"] { border-color: #0d9488; background: #f0fdfa; }
"#;

/// Draws `#plan-data` into `#plan`. Kept free of libraries so the page
/// opens offline.
const SCRIPT: &str = r#"
(function () {
  const data = JSON.parse(document.getElementById('plan-data').textContent);
  const root = document.getElementById('plan');
  root.textContent = '';
  const el = (tag, cls, text) => {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  };
  const bytes = n => n.toLocaleString('en-US') + ' B';
  root.appendChild(el('h1', '', data.title));

  // The mesh's devices in a grid: the first mesh dim down, the others across.
  function meshGrid(mesh, t) {
    const dm = t.dims_mapping;
    const n = mesh.reduce((a, b) => a * b, 1);
    const cols = mesh.length > 1 ? n / mesh[0] : n;
    const g = el('span', 'mesh');
    g.style.gridTemplateColumns = 'repeat(' + cols + ', 9px)';
    const partial = new Set(t.partial_dims || []);
    for (let dev = 0; dev < n; dev++) {
      const coord = []; let r = dev;
      for (let k = mesh.length - 1; k >= 0; k--) { coord[k] = r % mesh[k]; r = Math.floor(r / mesh[k]); }
      // The block this device holds: per tensor dim, its index among the
      // splits of the mesh dims that shard it (major first).
      const block = dm.map(d => {
        const ds = d === -1 ? [] : (Array.isArray(d) ? d : [d]);
        return ds.reduce((acc, m) => acc * mesh[m] + coord[m], 0);
      });
      let h = 0;
      for (const b of block) h = (h * 31 + b + 1) % 360;
      const c = el('i');
      const sharded = dm.some(d => d !== -1 && !(Array.isArray(d) && d.length === 0));
      c.style.background = sharded ? 'hsl(' + ((h * 47) % 360) + ',65%,55%)' : '#a1a1aa';
      if ([...partial].some(m => coord[m] > 0)) c.style.opacity = '0.45';
      c.title = 'device ' + dev + ': block [' + block.join(', ') + ']';
      g.appendChild(c);
    }
    return g;
  }

  function section(name, s) {
    root.appendChild(el('h2', '', name + ': ' + s.ops.length + ' ops, ' + s.tensors.length + ' tensors on mesh ' + s.mesh.join('x')));
    const kinds = Object.keys(s.counts);
    root.appendChild(el('p', 'totals', kinds.length === 0 ? 'no communication'
      : kinds.map(k => s.counts[k] + ' ' + k + ' (' + bytes(s.bytes_by_kind[k]) + ')').join(', ')
        + '; total ' + bytes(s.total_bytes) + ' per device (' + s.dtype + ')'));
    const tensors = new Map(s.tensors.map(t => [t.name, t]));
    // Reshards by op and edge, in plan order.
    const at = new Map();
    for (const r of s.reshards) {
      const key = r.op + '\u0000' + r.edge.side + '\u0000' + r.edge.index;
      if (!at.has(key)) at.set(key, []);
      at.get(key).push(r);
    }
    const markers = (cell, op, side, i) => {
      for (const r of at.get(op + '\u0000' + side + '\u0000' + i) || []) {
        for (const st of r.steps) {
          if (st.kind === 'slice' || st.kind === 'make_partial') continue;
          const m = el('span', 'collective', r.tensor + ': ' + st.text + ' \u00b7 ' + bytes(st.bytes));
          m.dataset.kind = st.kind;
          m.title = r.from.text + ' -> ' + r.to.text;
          cell.appendChild(m);
        }
      }
    };
    const chip = name => {
      const t = tensors.get(name);
      const c = el('span', 'tensor' + (t && t.partial_dims.length ? ' partial' : ''));
      c.appendChild(el('code', '', name));
      if (t) {
        c.appendChild(el('span', 'layout', t.shape.join('x') + ' ' + t.text));
        c.appendChild(meshGrid(s.mesh, t));
        c.title = 'origin: ' + t.origin;
      }
      return c;
    };
    const table = el('table');
    s.ops.forEach((op, k) => {
      const row = el('tr');
      row.appendChild(el('td', 'idx', String(k)));
      const head = el('td', 'op');
      head.appendChild(el('b', '', op.name));
      head.appendChild(el('span', '', ' ' + op.rule));
      row.appendChild(head);
      const ins = el('td');
      op.inputs.forEach((n, i) => { markers(ins, op.name, 'input', i); ins.appendChild(chip(n)); });
      row.appendChild(ins);
      const outs = el('td');
      op.outputs.forEach((n, i) => {
        outs.appendChild(chip(n));
        markers(outs, op.name, 'output', i);
        markers(outs, op.name, 'result', i);
      });
      row.appendChild(outs);
      table.appendChild(row);
    });
    root.appendChild(table);
  }
  section('forward', data.forward);
  if (data.backward) section('backward', data.backward);
})();
"#;
