//! The choices a rule makes where sharding semantics are not forced (docs/semantics.md §4).
//! The classic (Paddle test-suite) behaviour is the default of each; the
//! refinements of Paddle 3.3.1, Shardy and DTensor are further variants, chosen
//! per rule, never special cases inside one rule.

/// What happens when one mesh dim ends up claimed by several axes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Conflicts {
    /// The axis that claimed the mesh dim first (tensor order, then dim order)
    /// keeps it; the others lose it. Paddle's `merge_conflicts = true`.
    #[default]
    FirstWins,
    /// An error naming the mesh dim and two axes. Paddle's `merge_conflicts = false`.
    /// A grad's operands, which nothing made agree, settle first-wins
    /// instead: their reshards are a sound answer.
    Strict,
    /// Axes settle by role, in order (Paddle 3.3.1's matmul, Shardy's factor
    /// precedence): *batch* axes (the dims `...` stands for, and labels every
    /// input and an output have) follow the input whose batch dims carry the
    /// most shards, co-sharded with the others' unused mesh dims and trimmed
    /// until divisible; *free* axes (in an output, not in every input) keep
    /// their mesh dims unless a batch axis took them, the larger extent
    /// winning a mesh dim two want; *contracted* axes take the union of the
    /// inputs' shardings (most shards first) minus every mesh dim taken,
    /// trimmed until divisible. Backward and grad merge first-wins, with the
    /// same divisibility by role (batch axes must divide).
    RolePriority,
    /// The operands are aligned rather than merged (Paddle's
    /// `AlignDimsSharding`, the rule of `concat` and `stack`): for each mesh
    /// dim, when every operand (but those with no elements) places it alike,
    /// that placement stays: a shard of an axis every operand carries, or a
    /// `Sum`/`Avg` partial, which the requirements and outputs then keep.
    /// Otherwise the mesh dim goes to the axis every operand carries that
    /// costs least to reshard to (the sum, over the operands not yet sharding
    /// it, of their local volume times the mesh dim's size; never to an axis
    /// another mesh dim took or one smaller than the mesh dim; the earlier
    /// axis on a tie). Forward aligns the inputs, grad the grad op's
    /// operands; backward merges first-wins.
    Align,
}

/// What happens to a sharding whose mesh dims' product does not divide the
/// axis extent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Divisibility {
    /// Uneven shards are fine (classic Paddle, DTensor, Shardy).
    #[default]
    Uneven,
    /// Trailing mesh dims are dropped until the product divides the extent, on
    /// the given and the derived side alike.
    Drop,
    /// As [`Divisibility::Drop`], but only on the derived side (outputs in
    /// forward, inputs in backward); the given side is returned unchanged.
    /// Paddle 3.3.1's softmax and transpose rules do this. It is **not
    /// sound** for an axis both sides carry (a device cannot produce the
    /// claimed layout without a reshard; `spmd-check` shows it), so no
    /// built-in rule uses it; it exists to reproduce Paddle when asked to.
    DropDerived,
}

/// What happens to partial status on a rule's inputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum PartialInputs {
    /// Required inputs are never partial: a partial input is reduced first.
    #[default]
    Drop,
    /// The op is linear in each input (multiply, DTensor's linearity rules):
    /// the first input with a `Sum` partial keeps it, on the mesh dims no axis
    /// shards, and every output inherits it; other inputs' partials are
    /// dropped (a product of two partial sums is not a partial sum). Paddle
    /// 3.3.1's multiply (`PADDLE-3.3.1.md` §B).
    Linear,
}

/// What backward inference does with an input axis that no output has
/// (a contracted axis, an embedding table's rows).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum MissingAxis {
    /// The axis is replicated on the input (the semantics' unsharded-missing-axis rule).
    #[default]
    Replicate,
    /// The call fails with [`SpmdError::MissingAxis`](crate::SpmdError::MissingAxis).
    Error,
}

/// What backward inference does with the partial status the given outputs
/// carry. Either way the answer is a fixed point of forward: the outputs come
/// back exactly as forward computes them from the returned requirements, so
/// a partial status is never returned "as given" unless the requirements
/// produce it (`docs/semantics.md`, "Backward").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum BackwardPartial {
    /// Partial Stage-II: an output partial over mesh dim `d` is explained by
    /// the first contracted axis (in notation order) with the partial's
    /// reduce type that is not never-sharded, whose extent `d` (with the
    /// axis's other mesh dims) divides, and that no other axis holds `d` on:
    /// that axis is sharded over `d` in every input carrying it (matmul: out
    /// partial over `d` gives `k` on `d` in x and y; embedding: the table's
    /// rows on `d`). A rule that keeps partial inputs in forward
    /// ([`PartialInputs::Linear`], [`Conflicts::Align`]) may explain a `Sum`
    /// (or, aligned, an `Avg`) partial by its inputs being partial instead.
    /// What nothing explains comes back not partial: the caller reduces it.
    #[default]
    Explain,
    /// Nothing is explained: the outputs come back with only the partial
    /// status forward derives (Paddle 3.3.1's elementwise, softmax,
    /// transpose, ... reverse rules reset it).
    Reset,
}

/// Whether a sharding given on a dim that is never sharded (a `1` dim, a
/// never-sharded axis, a broadcast size-1 dim) still claims its mesh dims
/// in the merge.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum UnshardedClaims {
    /// It does (docs/semantics.md §4 steps 2-3): the dim is replicated in the end, but
    /// an axis that wants the same mesh dim later loses it, first-wins.
    #[default]
    Count,
    /// Such dims are unsharded before the merge, so their mesh dims are free
    /// for the other axes (Paddle 3.3.1's flash attention unshards the
    /// sequence and head dims of q, k and v first).
    Ignore,
}

/// What happens to the shardings of a compound dim's minor factors (`b` of
/// `(ab)`) on a tensor that holds them as dims of their own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Compounds {
    /// They are never sharded across the reshape: only the major factor's
    /// own sharding carries (docs/semantics.md §3).
    #[default]
    MajorOnly,
    /// When the major factor is sharded, the minor factors' mesh dims are
    /// appended to it, in order, as long as the major's extent stays
    /// divisible by the mesh dims' product (the first that does not, or an
    /// unsharded minor, stops it): `x [4, 2, 6]` mapped `[0, 1, -1]`,
    /// flattened to `[(ab), c]` on a 2x2 mesh, is required
    /// `[[0, 1], -1, -1]` and gives `[[0, 1], -1]`. Each device's block of
    /// the merged dim is then one contiguous range, so nothing is gathered
    /// over the minor's mesh dims (Paddle 3.3.1's reshape and flatten).
    Absorb,
}

/// One rule's choice of every policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Policy {
    pub conflicts: Conflicts,
    pub divisibility: Divisibility,
    pub partial_inputs: PartialInputs,
    pub missing_axis: MissingAxis,
    pub backward_partial: BackwardPartial,
    pub unsharded_claims: UnshardedClaims,
    pub compounds: Compounds,
}

impl Policy {
    /// Paddle's classic semantics: first-wins conflicts, uneven shards allowed,
    /// partial inputs dropped, missing axes replicated.
    pub const CLASSIC: Policy = Policy {
        conflicts: Conflicts::FirstWins,
        divisibility: Divisibility::Uneven,
        partial_inputs: PartialInputs::Drop,
        missing_axis: MissingAxis::Replicate,
        backward_partial: BackwardPartial::Explain,
        unsharded_claims: UnshardedClaims::Count,
        compounds: Compounds::MajorOnly,
    };

    /// The classic policy with strict conflicts.
    pub const STRICT: Policy = Policy {
        conflicts: Conflicts::Strict,
        ..Policy::CLASSIC
    };

    pub const fn with_conflicts(mut self, c: Conflicts) -> Policy {
        self.conflicts = c;
        self
    }
    pub const fn with_compounds(mut self, c: Compounds) -> Policy {
        self.compounds = c;
        self
    }
    pub const fn with_unsharded_claims(mut self, u: UnshardedClaims) -> Policy {
        self.unsharded_claims = u;
        self
    }
    pub const fn with_divisibility(mut self, d: Divisibility) -> Policy {
        self.divisibility = d;
        self
    }
    pub const fn with_partial_inputs(mut self, p: PartialInputs) -> Policy {
        self.partial_inputs = p;
        self
    }
    pub const fn with_missing_axis(mut self, m: MissingAxis) -> Policy {
        self.missing_axis = m;
        self
    }
    pub const fn with_backward_partial(mut self, b: BackwardPartial) -> Policy {
        self.backward_partial = b;
        self
    }
}
