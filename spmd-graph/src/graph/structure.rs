//! A graph's structure in flat arrays: every op's tensors and kind, every
//! tensor's shape. Propagation reads these once per rule call, in order,
//! rather than chasing one allocation per op and per tensor (at 100k ops
//! those were cache misses). The builder appends to them as ops and
//! tensors are declared, and the graph keeps them as built: they are the
//! only copy.

use super::{OpId, OpKind, TensorId};

#[derive(Clone, Debug, Default)]
pub(crate) struct Structure {
    /// Every op's inputs then outputs, op after op.
    io: Vec<TensorId>,
    /// Per op: where its tensors start in `io`, and how many inputs and
    /// outputs it has.
    spans: Vec<(u32, u32, u32)>,
    kinds: Vec<OpKind>,
    /// Every tensor's dims, tensor after tensor.
    dims: Vec<usize>,
    /// Per tensor: where its dims start in `dims`, and its rank.
    shapes: Vec<(u32, u32)>,
}

impl Structure {
    /// Appends an op (the next [`OpId`]).
    pub(crate) fn push_op(&mut self, kind: OpKind, inputs: &[TensorId], outputs: &[TensorId]) {
        self.spans.push((
            self.io.len() as u32,
            inputs.len() as u32,
            outputs.len() as u32,
        ));
        self.io.extend_from_slice(inputs);
        self.io.extend_from_slice(outputs);
        self.kinds.push(kind);
    }

    /// Appends a tensor (the next [`TensorId`]).
    pub(crate) fn push_tensor(&mut self, shape: &[usize]) {
        self.shapes
            .push((self.dims.len() as u32, shape.len() as u32));
        self.dims.extend_from_slice(shape);
    }

    /// Op `o`'s inputs and outputs.
    #[inline]
    pub(crate) fn io(&self, o: OpId) -> (&[TensorId], &[TensorId]) {
        let (start, n_in, n_out) = self.spans[o.index()];
        let (start, n_in, n_out) = (start as usize, n_in as usize, n_out as usize);
        self.io[start..start + n_in + n_out].split_at(n_in)
    }

    #[inline]
    pub(crate) fn kind(&self, o: OpId) -> OpKind {
        self.kinds[o.index()]
    }

    #[inline]
    pub(crate) fn shape(&self, t: TensorId) -> &[usize] {
        let (start, rank) = self.shapes[t.index()];
        &self.dims[start as usize..start as usize + rank as usize]
    }

    #[inline]
    pub(crate) fn rank(&self, t: TensorId) -> usize {
        self.shapes[t.index()].1 as usize
    }
}
