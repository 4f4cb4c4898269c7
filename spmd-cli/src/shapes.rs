//! Output shapes from a notation and the inputs' shapes (rule results carry
//! dist attrs only), so that outputs can be shown with their shapes.

use spmd_core::notation::{Dim, Plan, Term};

const UNKNOWN: usize = usize::MAX;

/// What one tensor dim of a term is: a plain axis, the `k`-th ellipsis dim
/// (right-aligned over `width`), `1`, or a compound.
enum Slot {
    Axis(usize),
    Ell(usize),
    One,
    Compound(u16, u8),
}

fn slot(plan: &Plan<'_>, term: Term, rank: usize, width: usize, dim: usize) -> Slot {
    let dims = plan.dims_of(term);
    let of = |d: &Dim| match *d {
        Dim::Axis(a) => Slot::Axis(a as usize),
        Dim::One => Slot::One,
        Dim::Compound { start, len } => Slot::Compound(start, len),
    };
    match term.ellipsis {
        None => of(&dims[dim]),
        Some(e) => {
            let e = e as usize;
            let ell = rank - term.len as usize;
            if dim < e {
                of(&dims[dim])
            } else if dim < e + ell {
                Slot::Ell(width - ell + (dim - e))
            } else {
                of(&dims[dim - ell])
            }
        }
    }
}

fn learn(known: &mut usize, size: usize) {
    if *known == UNKNOWN || *known == 1 {
        *known = size;
    }
}

/// The outputs' shapes, or `None` when the inputs do not fit the notation
/// (inference reports why) or an extent cannot be known.
pub fn output_shapes(plan: &Plan<'_>, inputs: &[&[usize]]) -> Option<Vec<Vec<usize>>> {
    if inputs.len() != plan.n_inputs() {
        return None;
    }
    let mut width = 0;
    for (i, s) in inputs.iter().enumerate() {
        let t = plan.input(i);
        match t.ellipsis {
            Some(_) => width = width.max(s.len().checked_sub(t.len as usize)?),
            None if s.len() == t.len as usize => {}
            None => return None,
        }
    }
    let mut axes = vec![UNKNOWN; plan.n_axes()];
    let mut ell = vec![UNKNOWN; width];
    for (i, s) in inputs.iter().enumerate() {
        for (d, &size) in s.iter().enumerate() {
            match slot(plan, plan.input(i), s.len(), width, d) {
                Slot::Axis(a) => learn(&mut axes[a], size),
                Slot::Ell(k) => learn(&mut ell[k], size),
                _ => {}
            }
        }
    }
    // A compound with one unknown factor: the quotient.
    for (i, s) in inputs.iter().enumerate() {
        for (d, &size) in s.iter().enumerate() {
            if let Slot::Compound(start, len) = slot(plan, plan.input(i), s.len(), width, d) {
                let factors = plan.compound(start, len);
                let unknown: Vec<_> = factors
                    .iter()
                    .filter(|&&f| axes[f as usize] == UNKNOWN)
                    .collect();
                if let [f] = unknown.as_slice() {
                    let f = **f;
                    let known: usize = factors
                        .iter()
                        .filter(|&&g| g != f)
                        .fold(1usize, |p, &g| p.saturating_mul(axes[g as usize]));
                    if known != 0 && size % known == 0 {
                        axes[f as usize] = size / known;
                    }
                }
            }
        }
    }
    (0..plan.n_outputs())
        .map(|o| {
            let t = plan.output(o);
            let rank = t.len as usize + if t.ellipsis.is_some() { width } else { 0 };
            (0..rank)
                .map(|d| {
                    let e = match slot(plan, t, rank, width, d) {
                        Slot::Axis(a) => axes[a],
                        Slot::Ell(k) => ell[k],
                        Slot::One => 1,
                        Slot::Compound(start, len) => {
                            let f = plan.compound(start, len);
                            if f.iter().any(|&a| axes[a as usize] == UNKNOWN) {
                                UNKNOWN
                            } else {
                                f.iter()
                                    .fold(1usize, |p, &a| p.saturating_mul(axes[a as usize]))
                            }
                        }
                    };
                    (e != UNKNOWN).then_some(e)
                })
                .collect::<Option<Vec<usize>>>()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use spmd_core::notation;

    fn shapes(n: &str, inputs: &[&[usize]]) -> Option<Vec<Vec<usize>>> {
        output_shapes(&notation::parse(n).unwrap().plan(), inputs)
    }

    #[test]
    fn plain_and_broadcast() {
        assert_eq!(
            shapes("mk,kn->mn", &[&[64, 32], &[32, 48]]),
            Some(vec![vec![64, 48]])
        );
        assert_eq!(
            shapes("...mk,...kn->...mn", &[&[2, 1, 64, 32], &[5, 32, 48]]),
            Some(vec![vec![2, 5, 64, 48]])
        );
        assert_eq!(shapes("ij->", &[&[3, 4]]), Some(vec![vec![]]));
        assert_eq!(shapes("ij->i1", &[&[3, 4]]), Some(vec![vec![3, 1]]));
    }

    #[test]
    fn compounds() {
        assert_eq!(shapes("bs(hd)->bshd", &[&[2, 8, 64]]), None);
        assert_eq!(
            shapes("bshd->bs(hd)", &[&[2, 8, 4, 16]]),
            Some(vec![vec![2, 8, 64]])
        );
        assert_eq!(
            shapes("bs(hd),h->bshd", &[&[2, 8, 64], &[4]]),
            Some(vec![vec![2, 8, 4, 16]])
        );
    }

    #[test]
    fn misfits_are_none() {
        assert_eq!(shapes("mk,kn->mn", &[&[64, 32]]), None);
        assert_eq!(shapes("mk,kn->mn", &[&[64], &[32, 48]]), None);
        assert_eq!(shapes("...mk->...m", &[&[4]]), None);
    }
}
