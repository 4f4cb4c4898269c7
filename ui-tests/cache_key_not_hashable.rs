use spmd_core::{Call, Einsum, SpmdError, spmd_rule};

// `cache` keys built notations by the struct's value: it must be hashable.
#[spmd_rule(build(Self::notation, cache))]
struct Scale {
    factor: f64,
}

impl Scale {
    fn notation(&self, _call: &Call<'_>) -> Result<Einsum, SpmdError> {
        Einsum::new("...->...")
    }
}

fn main() {}
