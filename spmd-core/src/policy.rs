//! The choices a rule makes where sharding semantics are not forced (DESIGN §4).
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
    Strict,
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
    DropDerived,
}

/// What happens to partial status on a rule's inputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum PartialInputs {
    /// Required inputs are never partial: a partial input is reduced first.
    #[default]
    Drop,
}

/// What backward inference does with an input axis that no output has
/// (a contracted axis, an embedding table's rows).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum MissingAxis {
    /// The axis is replicated on the input (DESIGN's unsharded-missing-axis rule).
    #[default]
    Replicate,
    /// The call fails with [`SpmdError::MissingAxis`](crate::SpmdError::MissingAxis).
    Error,
}

/// What backward inference does with the partial status the given outputs carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum BackwardPartial {
    /// The outputs come back with the partial status they were given.
    #[default]
    Keep,
    /// The outputs come back non-partial (Paddle 3.3.1's elementwise,
    /// softmax, transpose, ... reverse rules).
    Reset,
}

/// One rule's choice of every policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Policy {
    pub conflicts: Conflicts,
    pub divisibility: Divisibility,
    pub partial_inputs: PartialInputs,
    pub missing_axis: MissingAxis,
    pub backward_partial: BackwardPartial,
}

impl Policy {
    /// Paddle's classic semantics: first-wins conflicts, uneven shards allowed,
    /// partial inputs dropped, missing axes replicated.
    pub const CLASSIC: Policy = Policy {
        conflicts: Conflicts::FirstWins,
        divisibility: Divisibility::Uneven,
        partial_inputs: PartialInputs::Drop,
        missing_axis: MissingAxis::Replicate,
        backward_partial: BackwardPartial::Keep,
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
    pub const fn with_divisibility(mut self, d: Divisibility) -> Policy {
        self.divisibility = d;
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
