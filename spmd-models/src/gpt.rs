//! A GPT-style model as a graph: token embedding, then transformer layers
//! (pre-norm attention and MLP blocks with residual adds), annotated only on
//! the weights Megatron-LM splits: the QKV and first MLP weights by columns,
//! the attention output and second MLP weights by rows, all on the
//! tensor-parallel mesh dim. With a data-parallel mesh dim, the token ids
//! are split along the batch on it too.
//!
//! The QKV projection is fused as in Megatron-LM: its output is reshaped to
//! `[batch, seq, heads, 3 * head_dim]` and split into q, k and v along the
//! last dim, so that each head's q, k and v sit on the same device.

use spmd_core::{Attrs, DistAttr, Mesh, MeshDim, Registry, Sharding};

use spmd_graph::{Graph, GraphBuilder, GraphError, TensorId};

/// The sizes of the model and how it is laid out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GptConfig {
    pub batch: usize,
    pub seq: usize,
    pub hidden: usize,
    pub heads: usize,
    pub ffn: usize,
    pub vocab: usize,
    pub layers: usize,
    pub mesh: Vec<usize>,
    /// The tensor-parallel mesh dim.
    pub tp: MeshDim,
    /// The data-parallel mesh dim, if any.
    pub dp: Option<MeshDim>,
}

impl GptConfig {
    /// A small layer on a 4-way tensor-parallel mesh (Megatron's TP only).
    pub fn small_tp() -> GptConfig {
        GptConfig {
            batch: 8,
            seq: 128,
            hidden: 256,
            heads: 8,
            ffn: 1024,
            vocab: 1000,
            layers: 1,
            mesh: vec![4],
            tp: 0,
            dp: None,
        }
    }

    /// [`small_tp`](GptConfig::small_tp) plus 2-way data parallelism on a
    /// second mesh dim: mesh `[2, 4]`, dp = 0, tp = 1.
    pub fn small_dp_tp() -> GptConfig {
        GptConfig {
            mesh: vec![2, 4],
            tp: 1,
            dp: Some(0),
            ..GptConfig::small_tp()
        }
    }
}

/// A built GPT graph and its named tensors.
#[derive(Debug)]
pub struct Gpt {
    pub graph: Graph,
    /// The last layer's output.
    pub output: TensorId,
    /// Every weight, in declaration order.
    pub params: Vec<TensorId>,
}

/// Builds the model of `cfg` (see the module docs).
///
/// ```
/// use spmd_graph::{DType, plan, propagate};
/// use spmd_models::{GptConfig, gpt};
///
/// let model = gpt(&GptConfig::small_tp(), &spmd_ops::builtins())?;
/// let p = propagate(&model.graph)?;
/// let plan = plan(&model.graph, &p, DType::F32)?;
/// assert_eq!(plan.count("all-reduce"), 2);    // Megatron-LM's forward
/// # Ok::<(), spmd_graph::GraphError>(())
/// ```
pub fn gpt(cfg: &GptConfig, registry: &Registry) -> Result<Gpt, GraphError> {
    let mesh = Mesh::new(&cfg.mesh)?;
    let rank = |n: usize| vec![Sharding::REPLICATED; n];
    let on = |mut m: Vec<Sharding>, dim: usize, d: MeshDim| {
        m[dim] = Sharding::on(d);
        DistAttr::new(spmd_core::DimsMapping::from_shardings(&m))
    };
    let (b, s, h, nh, f) = (cfg.batch, cfg.seq, cfg.hidden, cfg.heads, cfg.ffn);
    let hd = h / nh.max(1);
    let mut g = GraphBuilder::new(mesh);
    let mut params = Vec::new();

    let ids = g.tensor("ids", &[b, s])?;
    if let Some(dp) = cfg.dp {
        g.annotate(ids, on(rank(2), 0, dp))?;
    }
    let table = g.param("embedding.table", &[cfg.vocab, h], None)?;
    params.push(table);
    let mut x = g.apply(
        "embedding",
        "embedding",
        Attrs::new(),
        &[ids, table],
        ("x0", &[b, s, h]),
    )?;

    for l in 0..cfg.layers {
        let n = |name: &str| format!("l{l}.{name}");
        let mut param = |g: &mut GraphBuilder, name: &str, shape: &[usize], attr| {
            let t = g.param(&n(name), shape, attr)?;
            params.push(t);
            Ok::<_, GraphError>(t)
        };
        let bsh: &[usize] = &[b, s, h];
        let norm = Attrs::new().with("begin_norm_axis", 2i64);
        let none = Attrs::new;

        // Attention block.
        let g1 = param(&mut g, "ln1.scale", &[h], None)?;
        let b1 = param(&mut g, "ln1.bias", &[h], None)?;
        let ln1 = g.apply_n(
            &n("ln1"),
            "layer_norm",
            norm.clone(),
            &[x, g1, b1],
            &[
                (&n("ln1.out"), bsh),
                (&n("ln1.mean"), &[b, s]),
                (&n("ln1.var"), &[b, s]),
            ],
        )?[0];
        let w_qkv = param(
            &mut g,
            "qkv.weight",
            &[h, 3 * h],
            Some(on(rank(2), 1, cfg.tp)),
        )?;
        let b_qkv = param(&mut g, "qkv.bias", &[3 * h], None)?;
        let qkv = g.apply(
            &n("qkv"),
            "matmul",
            none(),
            &[ln1, w_qkv],
            (&n("qkv.out"), &[b, s, 3 * h]),
        )?;
        let qkv = g.apply(
            &n("qkv.add_bias"),
            "add",
            none(),
            &[qkv, b_qkv],
            (&n("qkv.biased"), &[b, s, 3 * h]),
        )?;
        let heads_shape = [b as i64, s as i64, nh as i64, 3 * hd as i64];
        let qkv = g.apply(
            &n("qkv.to_heads"),
            "reshape",
            Attrs::new().with("shape", &heads_shape[..]),
            &[qkv],
            (&n("qkv.heads"), &[b, s, nh, 3 * hd]),
        )?;
        let head: &[usize] = &[b, s, nh, hd];
        let qkv3 = g.apply_n(
            &n("qkv.split"),
            "split",
            Attrs::new()
                .with("sections", &[hd as i64, hd as i64, hd as i64][..])
                .with("axis", -1i64),
            &[qkv],
            &[(&n("q"), head), (&n("k"), head), (&n("v"), head)],
        )?;
        let perm = Attrs::new().with("perm", &[0i64, 2, 1, 3][..]);
        let bhsd: &[usize] = &[b, nh, s, hd];
        let mut t = Vec::new();
        for (i, which) in ["q", "k", "v"].iter().enumerate() {
            t.push(g.apply(
                &n(&format!("{which}.transpose")),
                "transpose",
                perm.clone(),
                &[qkv3[i]],
                (&n(&format!("{which}.bhsd")), bhsd),
            )?);
        }
        let scores = g.apply(
            &n("scores"),
            "matmul",
            Attrs::new().with("trans_y", true),
            &[t[0], t[1]],
            (&n("scores.out"), &[b, nh, s, s]),
        )?;
        let scaled = g.apply(
            &n("scale"),
            "scale",
            none(),
            &[scores],
            (&n("scores.scaled"), &[b, nh, s, s]),
        )?;
        let probs = g.apply(
            &n("softmax"),
            "softmax",
            Attrs::new().with("axis", -1i64),
            &[scaled],
            (&n("probs"), &[b, nh, s, s]),
        )?;
        let ctx = g.apply(
            &n("context"),
            "matmul",
            none(),
            &[probs, t[2]],
            (&n("context.out"), bhsd),
        )?;
        let ctx = g.apply(
            &n("context.transpose"),
            "transpose",
            perm.clone(),
            &[ctx],
            (&n("context.bshd"), head),
        )?;
        let ctx = g.apply(
            &n("context.merge_heads"),
            "reshape",
            Attrs::new().with("shape", &[b as i64, s as i64, h as i64][..]),
            &[ctx],
            (&n("context.merged"), bsh),
        )?;
        let w_o = param(&mut g, "proj.weight", &[h, h], Some(on(rank(2), 0, cfg.tp)))?;
        let b_o = param(&mut g, "proj.bias", &[h], None)?;
        let proj = g.apply(
            &n("proj"),
            "matmul",
            none(),
            &[ctx, w_o],
            (&n("proj.out"), bsh),
        )?;
        let proj = g.apply(
            &n("proj.add_bias"),
            "add",
            none(),
            &[proj, b_o],
            (&n("proj.biased"), bsh),
        )?;
        let h1 = g.apply(&n("residual1"), "add", none(), &[x, proj], (&n("h1"), bsh))?;

        // MLP block.
        let g2 = param(&mut g, "ln2.scale", &[h], None)?;
        let b2 = param(&mut g, "ln2.bias", &[h], None)?;
        let ln2 = g.apply_n(
            &n("ln2"),
            "layer_norm",
            norm,
            &[h1, g2, b2],
            &[
                (&n("ln2.out"), bsh),
                (&n("ln2.mean"), &[b, s]),
                (&n("ln2.var"), &[b, s]),
            ],
        )?[0];
        let w1 = param(&mut g, "fc1.weight", &[h, f], Some(on(rank(2), 1, cfg.tp)))?;
        let bias1 = param(&mut g, "fc1.bias", &[f], None)?;
        let w2 = param(&mut g, "fc2.weight", &[f, h], Some(on(rank(2), 0, cfg.tp)))?;
        let bias2 = param(&mut g, "fc2.bias", &[h], None)?;
        let bsf: &[usize] = &[b, s, f];
        let a = g.apply(
            &n("fc1"),
            "matmul",
            none(),
            &[ln2, w1],
            (&n("fc1.out"), bsf),
        )?;
        let a = g.apply(
            &n("fc1.add_bias"),
            "add",
            none(),
            &[a, bias1],
            (&n("fc1.biased"), bsf),
        )?;
        let a = g.apply(&n("gelu"), "gelu", none(), &[a], (&n("gelu.out"), bsf))?;
        let y = g.apply(&n("fc2"), "matmul", none(), &[a, w2], (&n("fc2.out"), bsh))?;
        let y = g.apply(
            &n("fc2.add_bias"),
            "add",
            none(),
            &[y, bias2],
            (&n("fc2.biased"), bsh),
        )?;
        x = g.apply(&n("residual2"), "add", none(), &[h1, y], (&n("out"), bsh))?;
    }
    Ok(Gpt {
        graph: g.build(registry)?,
        output: x,
        params,
    })
}
