//! Op signatures: ops with the same rule, attributes, kind and tensor
//! shapes answer the same attrs the same (the memo answers them alike).

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use super::{OpId, OpInfo, OpKind, Structure};

/// Each op's signature, and whether another op shares it (only then can the
/// memo hit). Keyed by a hash of rule, attributes, kind and shapes, with
/// the representative op compared on a hash match: no text.
pub(super) fn signatures(ops: &[OpInfo], structure: &Structure) -> (Vec<u32>, Vec<bool>) {
    let tensors = |i: usize| {
        let (inputs, outputs) = structure.io(OpId(i as u32));
        (inputs.len(), outputs.len(), inputs.iter().chain(outputs))
    };
    let same = |i: usize, j: usize| {
        let (a, b) = (&ops[i], &ops[j]);
        let (a_in, a_out, a_tensors) = tensors(i);
        let (b_in, b_out, b_tensors) = tensors(j);
        a.rule == b.rule
            && a.attrs == b.attrs
            && structure.kind(OpId(i as u32)) == structure.kind(OpId(j as u32))
            && a.absent == b.absent
            && a_in == b_in
            && a_out == b_out
            && a_tensors
                .zip(b_tensors)
                .all(|(&x, &y)| structure.shape(x) == structure.shape(y))
    };
    let mut by_hash: HashMap<
        u64,
        smallvec::SmallVec<[(usize, u32); 1]>,
        rustc_hash::FxBuildHasher,
    > = HashMap::default();
    let mut n_signatures = 0u32;
    let signatures: Vec<u32> = ops
        .iter()
        .enumerate()
        .map(|(i, op)| {
            let mut h = rustc_hash::FxHasher::default();
            op.rule.hash(&mut h);
            for (name, value) in op.attrs.iter() {
                name.hash(&mut h);
                hash_attr(value, &mut h);
            }
            matches!(structure.kind(OpId(i as u32)), OpKind::Forward).hash(&mut h);
            op.absent.bits().hash(&mut h);
            for &t in tensors(i).2 {
                structure.shape(t).hash(&mut h);
            }
            let bucket = by_hash.entry(h.finish()).or_default();
            match bucket.iter().find(|&&(j, _)| same(j, i)) {
                Some(&(_, sig)) => sig,
                None => {
                    bucket.push((i, n_signatures));
                    n_signatures += 1;
                    n_signatures - 1
                }
            }
        })
        .collect();
    let mut uses = vec![0u32; n_signatures as usize];
    for &sig in &signatures {
        uses[sig as usize] += 1;
    }
    let shared = signatures
        .iter()
        .map(|&sig| uses[sig as usize] > 1)
        .collect();
    (signatures, shared)
}

/// An attribute value into a signature hash (floats by their bits).
fn hash_attr(v: &spmd_core::AttrValue, h: &mut impl Hasher) {
    use spmd_core::AttrValue::*;
    std::mem::discriminant(v).hash(h);
    match v {
        Bool(b) => b.hash(h),
        Int(i) => i.hash(h),
        Float(f) => f.to_bits().hash(h),
        Str(s) => s.hash(h),
        Bools(l) => l.hash(h),
        Ints(l) => l.hash(h),
        Floats(l) => l.iter().for_each(|f| f.to_bits().hash(h)),
        Strs(l) => l.hash(h),
    }
}

#[cfg(test)]
mod tests {
    use spmd_core::{Attrs, Mesh};

    use crate::graph::{GraphBuilder, TensorId};

    /// Ops share a signature exactly when rule, attributes, kind and every
    /// tensor shape agree: an attribute, a float's value or a shape apart
    /// makes another signature.
    #[test]
    fn signatures_group_ops_that_answer_alike() {
        let mut b = GraphBuilder::new(Mesh::new(&[2]).unwrap());
        let x = b.tensor("x", &[4, 6]).unwrap();
        let y = b.tensor("y", &[4, 8]).unwrap();
        let softmax =
            |b: &mut GraphBuilder, name: &str, input: TensorId, axis: i64, shape: &[usize]| {
                b.apply(
                    name,
                    "softmax",
                    Attrs::new().with("axis", axis),
                    &[input],
                    (&format!("{name}.out"), shape),
                )
                .unwrap()
            };
        softmax(&mut b, "a", x, -1, &[4, 6]);
        softmax(&mut b, "b", x, -1, &[4, 6]);
        softmax(&mut b, "c", x, 0, &[4, 6]);
        softmax(&mut b, "d", y, -1, &[4, 8]);
        let scale = |b: &mut GraphBuilder, name: &str, s: f64| {
            b.apply(
                name,
                "scale",
                Attrs::new().with("scale", s),
                &[x],
                (&format!("{name}.out"), &[4, 6]),
            )
            .unwrap()
        };
        scale(&mut b, "e", 2.0);
        scale(&mut b, "f", 2.0);
        scale(&mut b, "g", 2.5);
        let g = b.build(&spmd_ops::builtins()).unwrap();
        let s = &g.signatures;
        assert_eq!(s[0], s[1], "same rule, attributes and shapes");
        assert_ne!(s[0], s[2], "another axis");
        assert_ne!(s[0], s[3], "other shapes");
        assert_eq!(s[4], s[5], "same float");
        assert_ne!(s[4], s[6], "another float");
        assert_eq!(g.shared, [true, true, false, false, true, true, false]);
    }
}
