//! Products: `matmul` / `matmul_v2` (with `trans_x` / `trans_y` and
//! broadcast batch dims) and `bmm` against the einsum of their notation;
//! `embedding` / `lookup_table_v2` as the einsum `...j,jk->...k` of one-hot
//! ids (a row-sharded table makes each device look up the rows it owns and
//! contribute zeros elsewhere); `conv2d` and `conv2d_transpose` on 1×1
//! images with 1×1 filters, where the convolution is the einsum of its
//! channels; `fused_gemm_epilogue` / `linear_v2` (a product plus a bias) and
//! `fused_linear_param_grad_add` (accumulators) against the ops themselves.
//!
//! All built through the registry with Paddle's attributes, on random
//! shapes, meshes and mappings. Default: 64 cases per property for the core
//! ops, 48 for the rest; `SPMD_CHECK_CASES=N` for more.

mod common;

use proptest::prelude::*;
use spmd_check::{EinsumCheck, Input, Tensor, Values, check_backward, check_forward, einsum};
use spmd_core::SpmdRuleExt;
use spmd_core::{
    Attrs, DimsMapping, DistAttr, Mesh, ReduceType, RuleResult, Sharding, Spec, SpmdError, SpmdRule,
};

use common::einsum_check::batches;
use common::kernels::elementwise::add_bias;
use common::op_check::{assert_meaningful, check_all, tallies};
use common::{CASES, CORE_CASES, Tally, build, registry, run, specs};
use common::{einsum_check, op_check};

// ------------------------------------------------------------------ matmul

#[derive(Clone, Debug)]
struct MatmulCase {
    name: &'static str,
    trans_x: bool,
    trans_y: bool,
    shapes: Vec<Vec<usize>>,
    out: Vec<usize>,
    l: einsum_check::Layout,
}

impl MatmulCase {
    fn notation(&self) -> String {
        let x = if self.trans_x { "km" } else { "mk" };
        let y = if self.trans_y { "nk" } else { "kn" };
        format!("...{x},...{y}->...mn")
    }
    fn rule(&self) -> Box<dyn SpmdRule> {
        build(
            self.name,
            &Attrs::new()
                .with("trans_x", self.trans_x)
                .with("trans_y", self.trans_y),
        )
    }
}

fn matmul_case() -> impl Strategy<Value = MatmulCase> {
    (
        prop::sample::select(vec!["matmul", "matmul_v2"]),
        any::<bool>(),
        any::<bool>(),
        batches(),
        1usize..=5,
        1usize..=5,
        1usize..=5,
    )
        .prop_flat_map(|(name, tx, ty, (bx, by), m, k, n)| {
            let mut x = bx.clone();
            x.extend(if tx { [k, m] } else { [m, k] });
            let mut y = by.clone();
            y.extend(if ty { [n, k] } else { [k, n] });
            // The output's batch: the broadcast of both.
            let w = bx.len().max(by.len());
            let pad = |b: &[usize]| -> Vec<usize> {
                let mut v = vec![1; w - b.len()];
                v.extend(b);
                v
            };
            let mut out: Vec<usize> = pad(&bx)
                .iter()
                .zip(pad(&by))
                .map(|(&a, b)| a.max(b))
                .collect();
            out.extend([m, n]);
            let shapes = vec![x, y];
            (
                Just((name, tx, ty, shapes.clone(), out.clone())),
                einsum_check::layout(shapes, vec![out]),
            )
        })
        .prop_map(|((name, trans_x, trans_y, shapes, out), l)| MatmulCase {
            name,
            trans_x,
            trans_y,
            shapes,
            out,
            l,
        })
}

#[test]
fn matmul_forward_backward_grad() {
    let (fw, bw, gr) = (Tally::new(), Tally::new(), Tally::new());
    run(CORE_CASES, matmul_case(), |c| {
        let rule = c.rule();
        let mesh = Mesh::new(&c.l.mesh).unwrap();
        let check = EinsumCheck::new(&c.notation()).unwrap();
        fw.record(check.forward(&*rule, &mesh, &specs(&c.shapes, &c.l.inputs)))?;
        let shapes: Vec<&[usize]> = c.shapes.iter().map(Vec::as_slice).collect();
        bw.record(check.backward(&*rule, &mesh, &shapes, &c.l.outputs))?;
        gr.record(check.grad(&*rule, &mesh, &specs(&c.shapes, &c.l.inputs), &c.l.outputs))?;
        let _ = &c.out;
        Ok(())
    });
    fw.assert_meaningful("matmul forward");
    bw.assert_meaningful("matmul backward");
    gr.assert_meaningful("matmul grad");
}

// --------------------------------------------------------------- embedding

/// The embedding rule seen as the einsum `...j,jk->...k` of one-hot ids:
/// the one-hot operand is the ids with a trailing dim `j` that follows the
/// table's rows (forward, backward) or the table grad's rows (grad).
struct OneHot(Box<dyn SpmdRule>);

fn drop_last(a: &DistAttr) -> DistAttr {
    let s = a.dims_mapping.as_slice();
    DistAttr::new(DimsMapping::from_shardings(&s[..s.len().saturating_sub(1)]))
        .with_partial(a.partial)
}

fn push_rows(ids: &mut DistAttr, rows: Sharding) {
    let mut s = ids.dims_mapping.as_slice().to_vec();
    s.push(rows);
    ids.dims_mapping = DimsMapping::from_shardings(&s);
}

impl common::Directions for OneHot {
    fn op(&self) -> &'static str {
        self.0.name()
    }
    fn fwd(&self, mesh: &Mesh, inputs: &[Spec<'_>]) -> Result<RuleResult, SpmdError> {
        let ids_attr = drop_last(inputs[0].attr);
        let ids_shape = &inputs[0].shape[..inputs[0].shape.len() - 1];
        let mut r = self
            .0
            .forward(mesh, &[Spec::new(ids_shape, &ids_attr), inputs[1]])?;
        let rows = r.inputs[1].dims_mapping[0];
        push_rows(&mut r.inputs[0], rows);
        Ok(r)
    }
    fn bwd(
        &self,
        mesh: &Mesh,
        shapes: &[&[usize]],
        outputs: &[Spec<'_>],
    ) -> Result<RuleResult, SpmdError> {
        let ids_shape = &shapes[0][..shapes[0].len() - 1];
        let mut r = self.0.backward(mesh, &[ids_shape, shapes[1]], outputs)?;
        let rows = r.inputs[1].dims_mapping[0];
        push_rows(&mut r.inputs[0], rows);
        Ok(r)
    }
    fn grd(
        &self,
        mesh: &Mesh,
        inputs: &[Spec<'_>],
        dys: &[Spec<'_>],
    ) -> Result<RuleResult, SpmdError> {
        let ids_attr = drop_last(inputs[0].attr);
        let ids_shape = &inputs[0].shape[..inputs[0].shape.len() - 1];
        let mut r = self
            .0
            .grad(mesh, &[Spec::new(ids_shape, &ids_attr), inputs[1]], dys)?;
        let rows = r.outputs[0].dims_mapping[0];
        push_rows(&mut r.inputs[0], rows);
        Ok(r)
    }
}

impl SpmdRule for OneHot {
    fn name(&self) -> &'static str {
        self.0.name()
    }
    fn infer_into(
        &self,
        call: &spmd_core::Call<'_>,
        _: Option<&mut dyn spmd_core::Trace>,
        result: &mut RuleResult,
    ) -> Result<(), SpmdError> {
        *result = common::by_direction(self, call)?;
        Ok(())
    }
}

#[derive(Clone, Debug)]
struct EmbeddingCase {
    name: &'static str,
    padding_idx: i64,
    sparse: bool,
    ids: Vec<usize>,
    rows: usize,
    cols: usize,
    seed: u64,
    l: einsum_check::Layout,
}

impl EmbeddingCase {
    fn one_hot(&self) -> Tensor {
        let n: usize = self.ids.iter().product();
        let ids: Vec<usize> = (0..n)
            .map(|i| {
                (Tensor::probe(&[n], self.seed, Values::Integers).data()[i].abs() as usize)
                    % self.rows
            })
            .collect();
        let mut shape = self.ids.clone();
        shape.push(self.rows);
        Tensor::from_fn(&shape, |i| {
            let (pos, j) = i.split_at(i.len() - 1);
            let flat = pos.iter().zip(&self.ids).fold(0, |f, (&p, &e)| f * e + p);
            f64::from(ids[flat] == j[0])
        })
    }
}

fn embedding_case() -> impl Strategy<Value = EmbeddingCase> {
    (
        prop::sample::select(vec!["embedding", "lookup_table_v2"]),
        prop::sample::select(vec![-1i64, -1, -1, 0]),
        prop::bool::weighted(0.2),
        prop::collection::vec(1usize..=4, 0..=2),
        1usize..=6,
        1usize..=4,
        any::<u64>(),
    )
        .prop_flat_map(|(name, padding_idx, sparse, ids, rows, cols, seed)| {
            let mut one_hot = ids.clone();
            one_hot.push(rows);
            let mut out = ids.clone();
            out.push(cols);
            (
                Just((name, padding_idx, sparse, ids, rows, cols, seed)),
                einsum_check::layout(vec![one_hot, vec![rows, cols]], vec![out]),
            )
        })
        .prop_map(
            |((name, padding_idx, sparse, ids, rows, cols, seed), l)| EmbeddingCase {
                name,
                padding_idx,
                sparse,
                ids,
                rows,
                cols,
                seed,
                l,
            },
        )
}

#[test]
fn embedding_as_one_hot_einsum() {
    let (fw, bw, gr) = (Tally::new(), Tally::new(), Tally::new());
    run(CORE_CASES, embedding_case(), |c| {
        let attrs = Attrs::new()
            .with("padding_idx", c.padding_idx)
            .with("sparse", c.sparse);
        let rule = OneHot(build(c.name, &attrs));
        let mesh = Mesh::new(&c.l.mesh).unwrap();
        let mut one_hot_shape = c.ids.clone();
        one_hot_shape.push(c.rows);
        let shapes = vec![one_hot_shape, vec![c.rows, c.cols]];
        let check = EinsumCheck::new("...j,jk->...k")
            .unwrap()
            .value(0, c.one_hot());
        fw.record(check.forward(&rule, &mesh, &specs(&shapes, &c.l.inputs)))?;
        let s: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
        bw.record(check.backward(&rule, &mesh, &s, &c.l.outputs))?;
        let check = check.no_grad(&[0]);
        gr.record(check.grad(&rule, &mesh, &specs(&shapes, &c.l.inputs), &c.l.outputs))?;
        Ok(())
    });
    fw.assert_meaningful("embedding forward");
    bw.assert_meaningful("embedding backward");
    gr.assert_meaningful("embedding grad");
}

#[test]
fn bmm_forward_backward_grad() {
    let t = tallies();
    let dims = (1usize..=4, 1usize..=4, 1usize..=4, 1usize..=4)
        .prop_map(|(b, m, k, n)| (vec![vec![b, m, k], vec![b, k, n]], vec![b, m, n]));
    run(CASES, op_check::case(dims), |c| {
        check_all("bmm", &Attrs::new(), "bmk,bkn->bmn", &c, &t)
    });
    assert_meaningful("bmm", &t);
}

#[test]
fn conv2d_on_single_pixels_is_the_channel_einsum() {
    let t = tallies();
    let dims = (1usize..=4, 1usize..=4, 1usize..=4)
        .prop_map(|(n, c, m)| (vec![vec![n, c, 1, 1], vec![m, c, 1, 1]], vec![n, m, 1, 1]));
    run(CASES, op_check::case(dims), |c| {
        check_all("conv2d", &Attrs::new(), "nc11,mc11->nm11", &c, &t)
    });
    assert_meaningful("conv2d", &t);
}

#[test]
fn conv2d_transpose_on_single_pixels_is_the_channel_einsum() {
    let t = tallies();
    let dims = (1usize..=4, 1usize..=4, 1usize..=4)
        .prop_map(|(n, c, m)| (vec![vec![n, c, 1, 1], vec![c, m, 1, 1]], vec![n, m, 1, 1]));
    run(CASES, op_check::case(dims), |c| {
        check_all("conv2d_transpose", &Attrs::new(), "nc11,cm11->nm11", &c, &t)
    });
    assert_meaningful("conv2d_transpose", &t);
}

#[test]
fn gemm_with_bias_against_the_op() {
    let t = tallies();
    let dims = (1usize..=4, 1usize..=4, 1usize..=4)
        .prop_map(|(m, k, n)| (vec![vec![m, k], vec![k, n], vec![n]], vec![m, n]));
    run(
        CASES,
        (op_check::case(dims), any::<bool>()),
        |(c, linear_v2)| {
            // fused_gemm_epilogue requires the bias partial where the product
            // is; linear_v2 never splits k and drops the bias's own sharding.
            let rule = if linear_v2 {
                registry().build("linear_v2", &Attrs::new()).unwrap()
            } else {
                registry()
                    .build("fused_gemm_epilogue", &Attrs::new())
                    .unwrap()
            };
            let mesh = Mesh::new(&c.mesh).unwrap();
            let values: Vec<Tensor> = c
                .shapes
                .iter()
                .enumerate()
                .map(|(i, s)| Tensor::probe(s, i as u64 + 1, Values::Integers))
                .collect();
            let op = |v: &[Tensor]| {
                let p = einsum("mk,kn->mn", &[&v[0], &v[1]], ReduceType::Sum).unwrap();
                vec![add_bias(&p[0], &v[2])]
            };
            let inputs: Vec<Input> = values
                .iter()
                .zip(&c.inputs)
                .map(|(v, a)| Input::new(v.clone(), a.clone()))
                .collect();
            t[0].record(check_forward(&*rule, &mesh, &inputs, op))?;
            let outs: Vec<DistAttr> = c
                .outputs
                .iter()
                .map(|a| DistAttr::new(a.dims_mapping.clone()))
                .collect();
            t[1].record(check_backward(&*rule, &mesh, &values, &outs, op))?;
            Ok(())
        },
    );
    t[0].assert_meaningful("fused_gemm_epilogue / linear_v2 forward");
    t[1].assert_meaningful("fused_gemm_epilogue / linear_v2 backward");
}

#[test]
fn param_grad_accumulation_against_the_op() {
    let t = tallies();
    let dims = (1usize..=3, 1usize..=3, 1usize..=4, 1usize..=4).prop_map(|(b, s, k, n)| {
        (
            vec![vec![b, s, k], vec![b, s, n], vec![k, n], vec![n]],
            vec![k, n],
        )
    });
    run(CASES, op_check::case(dims), |c| {
        let rule = registry()
            .build("fused_linear_param_grad_add", &Attrs::new())
            .unwrap();
        let mesh = Mesh::new(&c.mesh).unwrap();
        let values: Vec<Tensor> = c
            .shapes
            .iter()
            .enumerate()
            .map(|(i, s)| Tensor::probe(s, i as u64 + 1, Values::Integers))
            .collect();
        let op = |v: &[Tensor]| {
            let dw = einsum("bsk,bsn->kn", &[&v[0], &v[1]], ReduceType::Sum).unwrap();
            let db = einsum("bsn->n", &[&v[1]], ReduceType::Sum).unwrap();
            vec![add_bias(&v[2], &dw[0]), add_bias(&v[3], &db[0])]
        };
        let inputs: Vec<Input> = values
            .iter()
            .zip(&c.inputs)
            .map(|(v, a)| Input::new(v.clone(), a.clone()))
            .collect();
        t[0].record(check_forward(&*rule, &mesh, &inputs, op))?;
        Ok(())
    });
    t[0].assert_meaningful("fused_linear_param_grad_add forward");
}
